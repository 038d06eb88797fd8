"""The small subcommands of ``kvcanary`` (the large ones live in their own modules)."""

from __future__ import annotations

import argparse
import json

import torch

from kvcanary.cli import arguments


@arguments("selfcheck")
def _selfcheck_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu")
    p.add_argument("--backend", default=None)


def selfcheck(args: argparse.Namespace) -> int:
    from kvcanary import selfcheck as sc

    found = sc.run(args.device, args.backend)
    if found <= 0:
        print("self-check FAILED: " + ("the clean steps reported violations" if found < 0 else "fault not detected"))
        return 1
    print("self-check passed: the injected fault was detected, the clean steps were silent")
    return 0


@arguments("backends")
def _backends_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="device to check (default: cpu, and cuda if present)")


def backends(args: argparse.Namespace) -> int:
    from kvcanary.registry import REGISTRY, Op

    devices = [torch.device(args.device)] if args.device else [torch.device("cpu")] + (
        [torch.device("cuda")] if torch.cuda.is_available() else [])
    print(f"{'backend':<10} {'device':<7} {'operation':<22} {'status':<10} reasons")
    for name, backend in sorted(REGISTRY.backends().items()):
        for dev in devices:
            for op in Op:
                reasons = backend.static_reasons(op, dev)
                support = backend.ops.get(op)
                status = "available" if not reasons else "declines"
                if not reasons and support is not None:
                    status += "" if support.capture_safe else " (eager)"
                text = "; ".join(f"[{r.kind.value}] {r}" for r in reasons) or "-"
                print(f"{name:<10} {dev.type:<7} {op.value:<22} {status:<10} {text}")
    for name, err in REGISTRY.load_errors().items():
        print(f"{name:<10} failed to load: {err}")
    return 0


@arguments("explain")
def _explain_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("code", help="an error code such as KVC-W012 (the second line of every kvcanary error)")
    p.add_argument("--markdown", action="store_true", help="print the page as Markdown (as on the site)")


def explain(args: argparse.Namespace) -> int:
    from kvcanary import codes
    from kvcanary.docsgen import catalog

    page = catalog.page(args.code)
    if page is None:
        known = sorted(codes.by_code())
        near = [c for c in known if c.startswith(args.code.strip().upper()[:5])][:10]
        print(f"unknown error code {args.code!r}" + (f"; codes like it: {', '.join(near)}" if near else "")
              + f" ({len(known)} codes: `kvcanary contracts` lists them)")
        return 2
    print(page.markdown() if args.markdown else page.text(), end="")
    return 0


@arguments("contracts")
def _contracts_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="machine-readable export: JSON Schema of every contract's fields, its rules and codes")
    p.add_argument("name", nargs="?", default=None, help="only this contract (e.g. launch_canary_write_kernel)")


def contracts(args: argparse.Namespace) -> int:
    from kvcanary.docsgen import export

    data = export.contracts_json()
    items = data["contracts"]
    if args.name is not None:
        items = [c for c in items if c["name"] == args.name]
        if not items:
            print(f"unknown contract {args.name!r}; known: {', '.join(c['name'] for c in data['contracts'])}")
            return 2
        data = {**data, "contracts": items}
    if args.json:
        print(json.dumps(data, indent=1, default=str))
        return 0
    for c in items:
        print(f"{c['name']} (KVC-{c['letter']}..., {len(c['checks'])} checks): {c['summary']}")
        if args.name is not None:
            for k in c["checks"]:
                print(f"  {k['code']}  {k['kind']:<16} {k['summary']}")
    return 0


@arguments("docs")
def _docs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="docs", help="the docs directory (default: ./docs)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated page is stale")
    p.add_argument("--update-codes", action="store_true",
                   help="first give new checks their stable codes (kvcanary/codebook.json)")


def docs(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kvcanary import codes
    from kvcanary.docsgen import generate

    if args.update_codes:
        added = codes.update_codebook()
        print(f"code book: {len(added)} new code(s)" + "".join(f"\n  {k}" for k in added))
    report = generate(Path(args.out), dry_run=args.check)
    if args.check:
        for rel in report.stale:
            print(f"stale: {rel}")
        print(f"{len(report.stale)} stale, {len(report.unchanged)} up to date")
        return 1 if report.stale else 0
    print(f"wrote {len(report.written)} page(s), removed {len(report.removed)}, "
          f"{len(report.unchanged)} unchanged, under {args.out}/")
    return 0

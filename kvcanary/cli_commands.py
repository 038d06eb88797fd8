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
    p.add_argument("code", help="an error code such as KVC-W087")


def explain(args: argparse.Namespace) -> int:
    from kvcanary import codes

    check = codes.by_code().get(args.code.upper())
    if check is None:
        print(f"unknown error code {args.code!r}")
        return 2
    print(f"{check.code}: {check.summary}\n\nlauncher: {check.contract}\nrule: {check.kind}\n"
          f"arguments: {', '.join(check.arguments)}\nmessage: kv-canary: {check.template}\n\n"
          f"why: {check.why}\n\nfix: {check.fix}\n\ndeclared at: {check.origin}")
    return 0


@arguments("contracts")
def _contracts_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable export")


def contracts(args: argparse.Namespace) -> int:
    from kvcanary import codes

    items = []
    for c in codes.contracts():
        items.append({
            "name": c.contract.name,
            "summary": c.contract.summary,
            "schema": c.model_json_schema(),
            "rules": [{"code": k.code, "kind": k.kind, "slug": k.slug, "arguments": list(k.arguments),
                       "message": "kv-canary: " + k.template, "summary": k.summary} for k in c.checks()],
        })
    if args.json:
        print(json.dumps(items, indent=1, default=str))
    else:
        for it in items:
            print(f"{it['name']}: {it['summary']} ({len(it['rules'])} rules)")
    return 0

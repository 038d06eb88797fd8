"""The small subcommands of ``kvcanary`` (the large ones live in their own modules), and the checks every
subcommand shares: a ``--device`` torch can use, a backend that is registered.

Nothing heavy is imported at module level, so ``kvcanary selfcheck --help`` stays as fast as
``kvcanary --help``; each command imports torch and the registry when it runs.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvcanary.cli import UsageError, arguments

if TYPE_CHECKING:
    import torch

    from kvcanary.registry import Backend, BackendError, Op, Reason


# -- shared checks ------------------------------------------------------------------------------------------
def parse_device(text: str) -> torch.device:
    """``text`` as a torch device, or a :class:`UsageError` naming the forms torch accepts."""
    import torch

    try:
        return torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        raise UsageError(f"unknown device {text!r}", hint="a torch device such as cpu, cuda or cuda:1") from None


def device_problem(dev: torch.device) -> tuple[str, str] | None:
    """Why torch cannot use ``dev`` on this machine, with a hint; None when it can."""
    import torch

    if dev.type == "cpu":
        return None
    if dev.type == "meta":
        return "the meta device holds no data (tensors without storage)", "use --device cpu or cuda"
    if dev.type == "cuda":
        if torch.version.cuda is None and not getattr(torch.version, "hip", None):
            return (f"this torch ({torch.__version__}) is a CPU-only build",
                    "install a CUDA build of torch, or use --device cpu")
        if not torch.cuda.is_available():
            return "torch sees no CUDA device", "check the driver (nvidia-smi), or use --device cpu"
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            return f"{dev} does not exist: torch sees {count} CUDA device(s)", f"use cuda:0 to cuda:{count - 1}"
        return None
    module = getattr(torch, dev.type, None)
    available = getattr(module, "is_available", None)
    if callable(available) and not available():
        return f"torch sees no {dev.type} device", "use --device cpu"
    return None


def usable_device(text: str) -> torch.device:
    """``text`` as a device torch can use here, or a :class:`UsageError` saying why not."""
    dev = parse_device(text)
    problem = device_problem(dev)
    if problem is not None:
        raise UsageError(f"device {text!r} is not usable: {problem[0]}", hint=problem[1])
    return dev


def _forced_from_env(forced: str | None, given: str | None) -> bool:
    from kvcanary.registry import ENV_BACKEND

    return given is None and forced is not None and os.environ.get(ENV_BACKEND) == forced


def backend_usage_error(exc: BackendError, given: str | None = None) -> UsageError:
    """A :class:`~kvcanary.registry.BackendError` as one line: what cannot run, every reason, the hints.

    ``given`` is the backend the command line named (None: the environment or the registry chose).
    """
    from kvcanary.registry import ENV_BACKEND

    head = (f"backend {exc.forced!r} cannot run {exc.op.value} on {exc.device}" if exc.forced
            else f"no backend can run {exc.op.value} on {exc.device}")
    parts = [r.message if exc.forced else f"{name}: {r.message}" for name, rs in exc.reasons.items() for r in rs]
    hints = list(dict.fromkeys(r.hint for rs in exc.reasons.values() for r in rs if r.hint))
    if _forced_from_env(exc.forced, given):
        hints.insert(0, f"{ENV_BACKEND}={exc.forced} is set in the environment: unset it or name another backend")
    return UsageError(f"{head}: {'; '.join(parts)}", hint="; ".join(hints))


def check_backend_name(given: str | None) -> None:
    """The forced backend (``given``, else ``KVCANARY_BACKEND``) must be registered."""
    from kvcanary.registry import ENV_BACKEND, REGISTRY

    name = given or os.environ.get(ENV_BACKEND) or None
    known = REGISTRY.backends()
    if name is None or name in known:
        return
    hint = (f"{ENV_BACKEND}={name} is set in the environment: unset it or name another backend"
            if given is None else "pass one of the known names, or leave --backend out")
    raise UsageError(f"no backend named {name!r} is registered (known: {', '.join(sorted(known)) or 'none'})", hint)


# -- selfcheck ----------------------------------------------------------------------------------------------
@arguments("selfcheck")
def _selfcheck_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--backend", default=None, help="force a backend (default: the registry's choice)")


def selfcheck(args: argparse.Namespace) -> int:
    from kvcanary import selfcheck as sc
    from kvcanary.registry import BackendError

    device = usable_device(args.device)
    check_backend_name(args.backend)
    try:
        found = sc.run(str(device), args.backend)
    except BackendError as exc:
        raise backend_usage_error(exc, args.backend) from None
    if found <= 0:
        print("self-check FAILED: " + ("the clean steps reported violations" if found < 0 else "fault not detected"))
        return 1
    print("self-check passed: the injected fault was detected, the clean steps were silent")
    return 0


# -- backends -----------------------------------------------------------------------------------------------
@arguments("backends")
def _backends_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="device to check (default: cpu, and cuda if torch sees one)")
    p.add_argument("--verbose", "-v", action="store_true", help="every reason of every backend, per operation")


def _cell(backend: Backend, op: Op, reasons: Sequence[Reason]) -> str:
    if reasons:
        return "declines"
    support = backend.ops.get(op)
    return "eager" if support is not None and not support.capture_safe else "yes"


def _reason_groups(per_op: dict[Op, list[Reason]]) -> list[tuple[str, list[Op]]]:
    """Identical reasons (the operation's name left out of the text) once each, with the operations they stop."""
    groups: dict[str, list[Op]] = {}
    for op, reasons in per_op.items():
        for r in reasons:
            text = f"[{r.kind.value}] {r}".replace(f" {op.value} ", " ")
            groups.setdefault(text, []).append(op)
    return list(groups.items())


def _ops_text(ops: Sequence[Op], every: int) -> str:
    return "every operation" if len(ops) == every else ", ".join(op.value for op in ops)


def _device_table(dev: torch.device, verbose: bool) -> list[str]:
    import torch

    from kvcanary.registry import ENV_BACKEND, REGISTRY, BackendError, Op, Reason, ReasonKind

    backends = sorted(REGISTRY.backends().items())
    problem = device_problem(dev)
    lines = [f"{dev} (torch {torch.__version__})" + (f": torch cannot use it: {problem[0]}" if problem else "")]
    cols = [name for name, _ in backends]
    widths = [max(9, len(n)) for n in cols]
    lines.append(f"  {'operation':<22} {'selected':<10} " + " ".join(f"{n:<{w}}" for n, w in zip(cols, widths,
                                                                                               strict=True)))
    declined: dict[str, dict[Op, list[Reason]]] = {}
    for op in Op:
        cells = []
        for (name, backend), w in zip(backends, widths, strict=True):
            reasons = list(backend.static_reasons(op, dev))
            if problem is not None:
                reasons.insert(0, Reason(ReasonKind.DEVICE, f"torch cannot use {dev}: {problem[0]}", problem[1]))
            if reasons:
                declined.setdefault(name, {})[op] = reasons
            cells.append(f"{_cell(backend, op, reasons):<{w}}")
        selected = "none"
        if problem is None:
            try:
                selected = REGISTRY.select(op, dev).backend.name
            except BackendError:
                selected = "none"
        lines.append(f"  {op.value:<22} {selected:<10} " + " ".join(cells))
    forced = os.environ.get(ENV_BACKEND)
    if forced:
        lines.append(f"  {ENV_BACKEND}={forced}: every launch is forced to {forced!r}")
    if declined:
        lines.append("  why backends decline" + ("" if verbose else " (the first reason; --verbose lists all)") + ":")
    for name, per_op in declined.items():
        groups = _reason_groups(per_op)
        shown = groups if verbose else groups[:1]
        for i, (text, ops) in enumerate(shown):
            lead = f"    {name}:" if i == 0 else " " * (len(name) + 5)
            lines.append(f"{lead} {text} [{_ops_text(ops, len(Op))}]")
        if not verbose and len(groups) > 1:
            lines.append(" " * (len(name) + 6) + f"(+{len(groups) - 1} more reason(s))")
    return lines


def backends(args: argparse.Namespace) -> int:
    import torch

    from kvcanary.registry import REGISTRY

    if args.device is not None:
        devices = [parse_device(args.device)]
    else:
        devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    out: list[str] = []
    for dev in devices:
        out += [*_device_table(dev, args.verbose), ""]
    out.append("yes: serves the operation; eager: serves it, but syncs with the host (not under CUDA-graph capture); "
               "selected: what a launch gets")
    for name, err in REGISTRY.load_errors().items():
        out.append(f"{name}: failed to load: {err}")
    for line in out:
        print(line)
    return 0


# -- explain ------------------------------------------------------------------------------------------------
@arguments("explain")
def _explain_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("code", help="an error code such as KVC-W012 or W012 (the second line of every kvcanary error)")
    p.add_argument("--markdown", action="store_true", help="print the page as Markdown (as on the site)")


def normalize_code(text: str) -> str:
    """``w87``, ``W087``, ``kvc-w087`` -> ``KVC-W087`` (anything else is returned upper-cased)."""
    import re

    code = text.strip().upper()
    m = re.fullmatch(r"(?:KVC-?)?([A-Z])(\d{1,3})", code)
    return f"KVC-{m.group(1)}{int(m.group(2)):03d}" if m else code


def explain(args: argparse.Namespace) -> int:
    from kvcanary import codes
    from kvcanary.docsgen import catalog

    code = normalize_code(args.code)
    page = catalog.page(code)
    if page is None:
        known = sorted(codes.by_code())
        near = [c for c in known if c.startswith(code[:5])][:10]
        raise UsageError(f"unknown error code {args.code!r}" + (f"; codes like it: {', '.join(near)}" if near else ""),
                         hint=f"`kvcanary contracts --codes` lists all {len(known)} codes")
    print(page.markdown() if args.markdown else page.text(), end="")
    return 0


# -- contracts ----------------------------------------------------------------------------------------------
@arguments("contracts")
def _contracts_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true",
                   help="machine-readable export: JSON Schema of every contract's fields, its rules and codes")
    p.add_argument("--codes", action="store_true", help="list every error code with what it checks")
    p.add_argument("name", nargs="?", default=None, help="only this contract (e.g. launch_canary_write_kernel)")


def contracts(args: argparse.Namespace) -> int:
    from kvcanary.docsgen import export

    data = export.contracts_json()
    items = data["contracts"]
    if args.name is not None:
        items = [c for c in items if c["name"] == args.name]
        if not items:
            raise UsageError(f"unknown contract {args.name!r}",
                             hint=f"known: {', '.join(c['name'] for c in data['contracts'])}")
        data = {**data, "contracts": items}
    if args.json:
        print(json.dumps(data, indent=1, default=str))
        return 0
    for c in items:
        codes = [k["code"] for k in c["checks"]]
        span = f"{codes[0]}..{codes[-1]}" if codes else "no codes"
        print(f"{c['name']} ({span}, {len(codes)} checks): {c['summary']}")
        if args.name is not None or args.codes:
            for k in c["checks"]:
                print(f"  {k['code']}  {k['kind']:<16} {k['summary']}")
    if not args.codes and args.name is None:
        print("\n`kvcanary contracts --codes` lists every code; `kvcanary explain CODE` prints its page")
    return 0


# -- docs ---------------------------------------------------------------------------------------------------
@arguments("docs")
def _docs_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=None,
                   help="the docs directory (default: the docs_dir of the mkdocs.yml here or in a parent folder)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated page is stale")
    p.add_argument("--update-codes", action="store_true",
                   help="first give new checks their stable codes (kvcanary/codebook.json)")


def docs(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kvcanary import codes
    from kvcanary.docsgen import find_docs_dir, generate

    out = Path(args.out) if args.out is not None else find_docs_dir(Path.cwd())
    if out is None:
        verb = "check the generated pages in DIR" if args.check else "write the generated pages into DIR"
        raise UsageError("no docs folder: there is no mkdocs.yml in this folder or its parents (run it in a "
                         "kvcanary checkout, or a project with its own docs)", hint=f"pass --out DIR to {verb}")
    if args.update_codes:
        added = codes.update_codebook()
        print(f"code book: {len(added)} new code(s)" + "".join(f"\n  {k}" for k in added))
    report = generate(out, dry_run=args.check)
    if args.check:
        for rel in report.stale:
            print(f"stale: {rel}")
        print(f"{len(report.stale)} stale, {len(report.unchanged)} up to date")
        return 1 if report.stale else 0
    print(f"wrote {len(report.written)} page(s), removed {len(report.removed)}, "
          f"{len(report.unchanged)} unchanged, under {out}/")
    return 0

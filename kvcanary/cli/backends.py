"""``kvcanary backends``: which backend serves each operation on each device here, and why the others
decline."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvcanary.cli.common import parse_device
from kvcanary.cli.parser import arguments
from kvcanary.devices import device_problem

if TYPE_CHECKING:
    import torch

    from kvcanary.registry import Backend, Op, Reason


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
            # where a backend runs comes first: "runs on cuda, not cpu" says more than a missing package
            reasons = sorted(backend.static_reasons(op, dev), key=lambda r: r.kind is not ReasonKind.DEVICE)
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


def main(args: argparse.Namespace) -> int:
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

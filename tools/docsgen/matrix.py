"""The backend support matrix, generated from what every registered backend declares.

Per operation and backend: the device types it serves and their priorities, CUDA-graph capture safety,
host syncs, per-call limits and notes; then what the registry says on the machine that built the page
(availability, and each backend's reasons for declining a device). Nothing here is written by hand: a
backend that changes its declaration changes this page at the next build.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from kvcanary.registry import REGISTRY, Backend, Op, OpSupport, Reason, ReasonKind

REASON_DOCS: Mapping[ReasonKind, str] = {
    ReasonKind.PACKAGE: "a Python package or toolchain the backend needs is missing",
    ReasonKind.DEVICE: "the backend does not serve this device type",
    ReasonKind.CAPABILITY: "the GPU lacks a compute capability or hardware feature",
    ReasonKind.INTERPRETER: "on this device the backend runs only through an interpreter that is not enabled",
    ReasonKind.OPERATION: "the backend does not implement this operation",
    ReasonKind.LIMIT: "an input of this call is outside what the backend supports",
    ReasonKind.CAPTURE: "the backend syncs with the host and a CUDA-graph capture is running",
    ReasonKind.BROKEN: "loading the implementation failed",
}


@dataclass(frozen=True)
class Cell:
    """What one backend says about one operation on one device type."""

    reasons: tuple[Reason, ...]
    priority: int | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.reasons and not self.error and self.priority is not None


def _esc(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _reasons(reasons: Sequence[Reason]) -> str:
    return "; ".join(f"[{r.kind.value}] {_esc(str(r))}" for r in reasons)


def _cell(backend: Backend, op: Op, device: torch.device) -> Cell:
    support = backend.ops.get(op)
    try:
        reasons = tuple(backend.static_reasons(op, device))
    except Exception as exc:  # a backend's own check failing is itself worth showing
        return Cell((), None, f"{type(exc).__name__}: {exc}")
    return Cell(reasons, support.priority(device.type) if support else None)


def _devices() -> list[torch.device]:
    return [torch.device("cpu"), torch.device("cuda")]


def _limits(support: OpSupport) -> str:
    if support.limits is None:
        return "-"
    doc = (support.limits.__doc__ or "").strip().splitlines()
    return _esc(doc[0]) if doc else "checked per call"


def _devices_text(support: OpSupport) -> str:
    return ", ".join(f"{'any' if d == '*' else d} ({p})" for d, p in sorted(support.devices.items()))


def matrix_markdown() -> str:
    """The support-matrix page."""
    backends = REGISTRY.backends()
    load_errors = REGISTRY.load_errors()
    cuda = torch.cuda.is_available()
    gpu = torch.cuda.get_device_name(0) if cuda else "none"
    out = [
        "# Backend support matrix", "",
        "Generated from the declarations of every backend in the `kvcanary.backends` entry-point group "
        "(and any registered in-process) when the site was built. `kvcanary backends` prints the same "
        "availability for the machine it runs on.", "",
        f"Built on: Python {platform.python_version()}, torch {torch.__version__}, "
        f"{platform.system()} {platform.machine()}, CUDA available: {'yes' if cuda else 'no'} (GPU: {gpu}).", "",
        "## Backends", "",
        "| backend | description | operations | available here |", "|---|---|---|---|",
    ]
    for name, b in sorted(backends.items()):
        try:
            avail = list(b.availability())
            here = "yes" if not avail else _reasons(avail)
        except Exception as exc:
            here = f"error: {_esc(f'{type(exc).__name__}: {exc}')}"
        ops = ", ".join(f"`{op.value}`" for op in Op if op in b.ops) or "none yet"
        out.append(f"| `{name}` | {_esc(b.description)} | {ops} | {here} |")
    for name, err in sorted(load_errors.items()):
        out.append(f"| `{name}` | failed to load | - | {_esc(err)} |")
    out += ["", "## What each backend declares", "",
            "Priority: when several backends can serve a launch, the highest wins (a forced backend, by "
            "`backend=`, `use_backend()` or `KVCANARY_BACKEND`, always wins or fails with every reason). "
            "Capture-safe: can run inside CUDA-graph capture. Host sync: the implementation waits for the "
            "device (e.g. sizes a loop from device values).", ""]
    for op in Op:
        out += [f"### `{op.value}`", "",
                "| backend | devices (priority) | capture-safe | host sync | per-call limits | notes |",
                "|---|---|---|---|---|---|"]
        rows = 0
        for name, b in sorted(backends.items()):
            s = b.ops.get(op)
            if s is None:
                continue
            rows += 1
            out.append(f"| `{name}` | {_devices_text(s)} | {'yes' if s.capture_safe else 'no'} | "
                       f"{'yes' if s.host_sync else 'no'} | {_limits(s)} | {_esc(s.notes) or '-'} |")
        if not rows:
            out.append("| - | no backend implements it | | | | |")
        out.append("")
    devices = _devices()
    out += ["## On the machine that built this page", "",
            "What the registry answers for each operation, backend and device type before per-call limits: "
            "**chosen** (the highest priority that can serve), *serves* (it could, at that priority), or the "
            "reasons it declines. On a machine without a GPU the CUDA column reflects declarations only.", "",
            "| operation | backend | " + " | ".join(d.type for d in devices) + " |",
            "|---|---|" + "---|" * len(devices)]
    for op in Op:
        cells = {(name, dev.type): _cell(b, op, dev) for name, b in sorted(backends.items()) for dev in devices}
        chosen: dict[str, str] = {}
        for dev in devices:
            best: tuple[int, str] | None = None
            for name in sorted(backends):
                cell = cells[(name, dev.type)]
                if cell.ok and cell.priority is not None and (best is None or cell.priority > best[0]):
                    best = (cell.priority, name)  # ties: the first name, as the registry does
            if best is not None:
                chosen[dev.type] = best[1]
        for name in sorted(backends):
            row = []
            for dev in devices:
                cell = cells[(name, dev.type)]
                if cell.error:
                    row.append(f"error: {_esc(cell.error)}")
                elif cell.ok:
                    row.append(f"**chosen** ({cell.priority})" if chosen.get(dev.type) == name
                               else f"*serves* ({cell.priority})")
                else:
                    row.append(_reasons(cell.reasons))
            out.append(f"| `{op.value}` | `{name}` | " + " | ".join(row) + " |")
    out += ["", "## Reason kinds", "",
            "Every refusal carries one of these kinds (stable: tools may group by them).", "",
            "| kind | meaning |", "|---|---|"]
    out += [f"| `{k.value}` | {REASON_DOCS.get(k, '')} |" for k in ReasonKind]
    return "\n".join(out) + "\n"

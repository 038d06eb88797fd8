"""triton: Triton kernels for every operation (GPU; CPU through Triton's interpreter, TRITON_INTERPRET=1).

Every operation matches ``torch_ref`` byte for byte (violation rows of one launch in any order) and is safe
to capture in a CUDA graph: fixed grids derived from shapes and capacities only, counts read on the device,
no host sync, no allocation, and no specialisation on batch sizes. On CUDA it outranks torch_ref; on the
CPU (interpreter) it ranks below it, so tests select it with ``backend="triton"``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence

import torch

from kvcanary.registry import Backend, Op, OpSupport, Reason, ReasonKind
from kvcanary_backends.priority import devices

_ENV = "TRITON_INTERPRET"


def _interpreting() -> bool:
    return os.environ.get(_ENV, "0") == "1"


class TritonBackend(Backend):
    """The Triton backend: available when triton imports; on the CPU only through the interpreter."""

    def availability(self) -> Sequence[Reason]:
        if importlib.util.find_spec("triton") is None:
            return (Reason(ReasonKind.PACKAGE, "triton is not installed", hint="pip install 'triton>=3.6'"),)
        return ()

    def device_reasons(self, op: Op, device: torch.device) -> Sequence[Reason]:
        jit = sys.modules.get("kvcanary_backends.triton._jit")
        built_interpreted = bool(getattr(jit, "INTERPRET", _interpreting())) if jit is not None else _interpreting()
        if device.type == "cpu" and not built_interpreted:
            why = ("triton runs on the CPU only through its interpreter, and TRITON_INTERPRET=1 was not set"
                   if not _interpreting() else
                   "the triton kernels were already built for the GPU (TRITON_INTERPRET=1 was set after import)")
            return (Reason(ReasonKind.INTERPRETER, why,
                           hint="set TRITON_INTERPRET=1 before anything imports the triton kernels"),)
        if device.type == "cuda" and built_interpreted:
            return (Reason(ReasonKind.INTERPRETER,
                           "TRITON_INTERPRET=1: the triton kernels were built for the interpreter, which would "
                           "copy CUDA tensors through the host (slow, and not capture-safe)",
                           hint="unset TRITON_INTERPRET to run the compiled kernels on the GPU"),)
        return ()


def _op(op: Op, path: str, notes: str = "") -> OpSupport:
    return OpSupport(f"kvcanary_backends.triton.{path}", devices("triton", op), capture_safe=True, notes=notes)


BACKEND = TritonBackend(
    name="triton",
    description="Triton kernels (GPU; CPU through TRITON_INTERPRET=1), byte-equal to torch_ref.",
    ops={
        Op.PLAN: _op(Op.PLAN, "plan:plan", "one fused launch; each program derives the offsets it needs"),
        Op.PLAN_OFFSETS: _op(Op.PLAN_OFFSETS, "plan_offsets:plan_offsets",
                             "one program over up to PLAN_BS_BLOCK_SIZE rows"),
        Op.PLAN_ENTRIES: _op(Op.PLAN_ENTRIES, "plan_entries:plan_entries", "persistent grid, per-entry binary search"),
        Op.WRITE: _op(Op.WRITE, "write:write", "one serial chain per request; real-KV folds in parallel programs"),
        Op.VERIFY: _op(Op.VERIFY, "verify:verify", "persistent grid over the plan's entries"),
        Op.SCATTER: _op(Op.SCATTER, "scatter:scatter_req_token_ids", "one program row per request; last writer wins"),
    },
)

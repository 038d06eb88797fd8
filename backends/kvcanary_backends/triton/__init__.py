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

from kvcanary.registry import Backend, Op, Reason, ReasonKind

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


BACKEND = TritonBackend(
    name="triton",
    description="Triton kernels (GPU; CPU through TRITON_INTERPRET=1), byte-equal to torch_ref.",
    package=__name__,  # each operation's module attaches its kernel: @OP.kernel("triton", ...)
    device_types=("cuda", "cpu"),
)

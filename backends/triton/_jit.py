"""Host-side helpers shared by the Triton kernels: typed jit decorators, launch geometry, tuning knobs.

Triton reads ``TRITON_INTERPRET`` when a kernel is *decorated* (module import), so :data:`INTERPRET` records
the mode the kernels of this package were built in; the backend refuses a device the built mode cannot
serve (compiled kernels cannot take CPU tensors, interpreted ones would sync with the host on CUDA).

Kernel parameters are annotated ``tl.tensor`` (or ``tl.constexpr``) only: Triton ignores the former (it
is no type it specialises on), mypy sees ``Any``, and no annotation forces a signature type.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import torch
import triton

INTERPRET: bool = os.environ.get("TRITON_INTERPRET", "0") == "1"
"""True when the kernels below were decorated under Triton's interpreter (CPU tensors only)."""

#: Launch shapes. Module-level so that ``benchmarks/bench_triton.py --sweep`` can try alternatives on a GPU
#: without touching the kernels (each key is read at launch time; changing one recompiles once).
TUNING: dict[str, int] = {
    "verify_block": 512,  # entries per program iteration
    "verify_warps": 8,
    "verify_waves": 8,  # persistent programs per SM
    "write_tile": 32,  # tokens per serial tile (one warp: one token per lane)
    "write_warps": 1,
    "write_fold_tile": 256,  # tokens per real-KV fold iteration
    "write_fold_tokens": 4096,  # tokens per fold program (how many fold programs a request gets)
    "write_fold_max": 16,  # at most this many fold programs per request row
    "plan_tile": 1024,  # verify entries per plan tile (a tile never spans two requests)
    "plan_chunk": 1024,  # batch rows held in registers at a time
    "plan_warps": 16,
    "plan_waves": 2,
    "entries_block": 1024,
    "entries_warps": 4,
    "entries_waves": 4,
    "scatter_block": 1024,
    "scatter_row_block": 1024,
    "scatter_max_tiles": 8,
}

_INTERPRETER_TUNING: dict[str, int] = {
    "verify_block": 16,
    "write_tile": 8,
    "write_fold_tile": 8,
    "write_fold_tokens": 16,
    "plan_tile": 8,
    "plan_chunk": 16,
    "entries_block": 16,
    "scatter_block": 16,
    "scatter_row_block": 4,
    "scatter_max_tiles": 2,
}
if INTERPRET:
    # The interpreter runs every program one after another with numpy: small blocks keep it fast, and on
    # the small inputs of CPU tests they make every multi-tile, multi-chunk and multi-program path run.
    TUNING.update(_INTERPRETER_TUNING)

INTERPRETER_PROGRAMS = 2
"""Persistent-grid size under the interpreter (programs run one after another on the host)."""


def kernel(*, do_not_specialize: Sequence[str] = ()) -> Callable[[Callable[..., Any]], Any]:
    """``triton.jit`` for a kernel; ``do_not_specialize`` names the integer arguments that change with the
    batch (sizes, counts), so that a new value never selects a new specialisation (a recompile)."""

    def decorate(fn: Callable[..., Any]) -> Any:
        return triton.jit(fn, do_not_specialize=list(do_not_specialize))

    return decorate


def device_fn(fn: Callable[..., Any]) -> Any:
    """``triton.jit`` for a device function called from kernels (inlined)."""
    return triton.jit(fn)


@cache
def _sm_count(index: int) -> int:
    return int(torch.cuda.get_device_properties(index).multi_processor_count)


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (a host query, cached; no device sync)."""
    if device.type != "cuda":
        return 1
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _sm_count(index)


def persistent_grid(device: torch.device, work_items: int, waves: int) -> int:
    """Programs of a persistent grid: enough to fill the GPU, never more than there are work items.

    ``work_items`` is a bound known from shapes (a capacity), never a device value, so the grid is fixed
    for a CUDA graph; programs find their real share in the device counts.
    """
    cap = INTERPRETER_PROGRAMS if device.type != "cuda" else num_sms(device) * waves
    return max(1, min(work_items, cap))


def cdiv(a: int, b: int) -> int:
    return -(-a // b)

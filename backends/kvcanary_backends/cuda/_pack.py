"""Host-side argument packing shared by the operations (pure Python: testable without a GPU).

Each operation turns its launcher keyword arguments into a specialization key (which compiled kernel) and a
flat tuple of ints (the kernel's parameters, all 8 bytes, in the order of its ``extern "C"`` signature).
Packing reads only shapes, strides and ``data_ptr()``: never a device value, so it is capture-safe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kvcanary.consts import REAL_KV_CHUNK_BYTES, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary_backends.cuda._toolchain import Compiled, Spec, load

Args = tuple[int, ...]
Shape = tuple[int, int, int, int]
"""(grid x, grid y, threads per block, dynamic shared-memory bytes) of a launch."""
SOURCE_PARAMS = 6
"""Kernel parameters per real-KV source: base, rows, row stride (bytes), page size, bytes per token, chunks."""


def fold(ctx: VerifyOrWriteContext) -> tuple[int, bool, Args]:
    """(number of sources the real-KV fold reads, whether it is PARTIAL, their kernel parameters: 6 per source
    in fold order). Mode NONE folds nothing, like no sources: the common case, answered first."""
    sources = ctx.real_kv_sources
    mode = int(ctx.real_kv_hash_mode)
    if not sources or mode == RealKvHashMode.NONE:
        return 0, True, ()
    partial = mode == RealKvHashMode.PARTIAL
    out: list[int] = []
    for s in sources:
        t = s.tensor
        chunks = 1 if partial else s.read_bytes // REAL_KV_CHUNK_BYTES
        out += (t.data_ptr(), t.shape[0], t.stride(0) * t.element_size(), s.page_size, s.num_bytes_per_token, chunks)
    return len(sources), partial, tuple(out)


def ptr(t: torch.Tensor | None) -> int:
    """A tensor's address (0 for None: the kernel never dereferences it then)."""
    return 0 if t is None else t.data_ptr()


def vec16(stride_bytes: int) -> bool:
    """Whether every canary record starts on a 16-byte boundary (the base is 16-aligned by contract)."""
    return stride_bytes % 16 == 0


class KernelCache:
    """Compiled kernels of one operation by (device index, specialization key); specs built only on a miss."""

    def __init__(self, make_spec: Callable[..., Spec], shmem: int = 0) -> None:
        self._make_spec = make_spec
        self._shmem = shmem
        self._hits: dict[tuple[Any, ...], Compiled] = {}

    def get(self, device_index: int, key: tuple[Any, ...]) -> Compiled:
        full = (device_index, *key)
        hit = self._hits.get(full)
        if hit is None:
            hit = load(self._make_spec(*key), device_index, self._shmem)
            self._hits[full] = hit
        return hit

    def spec(self, *key: Any) -> Spec:
        return self._make_spec(*key)

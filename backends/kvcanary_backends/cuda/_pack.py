"""Host-side argument packing shared by the operations (pure Python: testable without a GPU).

Each operation turns its launcher keyword arguments into a specialization key (which compiled kernel) and a
flat tuple of ints (the kernel's parameters, all 8 bytes, in the order of its ``extern "C"`` signature).
Packing reads only shapes, strides and ``data_ptr()``: never a device value, so it is capture-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from kvcanary.consts import MAX_REAL_KV_SOURCES, REAL_KV_CHUNK_BYTES, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary_backends.cuda._toolchain import Compiled, Spec, load, prepared

if TYPE_CHECKING:
    from kvcanary.operation import Operation

Args = tuple[int, ...]
Shape = tuple[int, int, int, int]
"""(grid x, grid y, threads per block, dynamic shared-memory bytes) of a launch."""
SOURCE_PARAMS = 6
"""Kernel parameters per real-KV source: base, rows, row stride (bytes), page size, bytes per token, chunks."""
BOOLS = (False, True)
SOURCES: tuple[tuple[int, bool], ...] = (
    (0, True), *((n, p) for n in range(1, MAX_REAL_KV_SOURCES + 1) for p in BOOLS))
"""(number of sources, PARTIAL) pairs a specialization can have: with no source the mode does not matter."""
F = TypeVar("F", bound=Callable[..., None])
K = TypeVar("K", bound=tuple[Any, ...])
S = TypeVar("S")
Launch = Callable[[], None]
"""A prepared launch (``OpSupport.prepare``): everything but the current stream read once."""


def _nothing() -> None:
    """The prepared launch of a call that launches nothing (no entry capacity, say)."""


def prepare_launch(cache: KernelCache, device_index: int, key: K, sizes: S,
                   args: Args, shape: Callable[[K, S, int], Shape | None]) -> Launch:
    """The launch of one packed call: its compiled kernel (compiled and loaded on first use) with the grid
    ``shape(key, sizes, resident blocks)`` gives; a call ``shape`` sizes to nothing launches nothing (and
    compiles nothing)."""
    if shape(key, sizes, 1) is None:
        return _nothing
    kernel = cache.get(device_index, key)
    grid = shape(key, sizes, kernel.max_blocks)
    assert grid is not None
    return prepared(kernel, device_index, grid, args)


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
    """Compiled kernels of one operation by (device index, specialization key); specs built only on a miss.

    The cache also declares the operation's specializations, beside its kernel: ``preload`` (the default ones,
    every extension off: what :func:`kvcanary_backends.cuda.preload` loads and CI compiles) and
    ``extensions`` (the extensions' ones CI compiles; others compile on first use, none is preloaded). A
    kernel attached with :meth:`kernel` is how the backend's tables of specializations find the cache
    (``kvcanary_backends.cuda._specs``): they are derived from the kernels attached to the operations.
    """

    def __init__(self, make_spec: Callable[..., Spec], shmem: int = 0, *, preload: Iterable[tuple[Any, ...]] = (),
                 extensions: Iterable[tuple[Any, ...]] = ()) -> None:
        self._make_spec = make_spec
        self._shmem = shmem
        self._hits: dict[tuple[Any, ...], Compiled] = {}
        self.preload: tuple[tuple[Any, ...], ...] = tuple(preload)
        """The default specialization keys (every extension off)."""
        self.extensions: tuple[tuple[Any, ...], ...] = tuple(extensions)
        """The extensions' specialization keys CI compiles."""

    def kernel(self, op: Operation, **options: Any) -> Callable[[F], F]:
        """Decorator: attach the decorated function as ``op``'s cuda kernel (``op.kernel("cuda", **options)``),
        launching from this cache; :func:`cache_of` finds the cache from the attached kernel."""

        def attach(fn: F) -> F:
            _CACHES[fn] = self
            return op.kernel("cuda", **options)(fn)

        return attach

    def get(self, device_index: int, key: tuple[Any, ...]) -> Compiled:
        full = (device_index, *key)
        hit = self._hits.get(full)
        if hit is None:
            hit = load(self._make_spec(*key), device_index, self._shmem)
            self._hits[full] = hit
        return hit

    def spec(self, *key: Any) -> Spec:
        return self._make_spec(*key)


_CACHES: dict[Callable[..., None], KernelCache] = {}


def cache_of(kernel: object) -> KernelCache | None:
    """The cache a kernel attached with :meth:`KernelCache.kernel` launches from (None: another kernel)."""
    return _CACHES.get(kernel) if callable(kernel) else None

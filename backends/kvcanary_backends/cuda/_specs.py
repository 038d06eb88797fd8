"""Every specialization the backend can launch, per operation (for :func:`backends.cuda.preload` and CI)."""

from __future__ import annotations

from typing import Any

from kvcanary.consts import MAX_REAL_KV_SOURCES
from kvcanary.registry import Op
from kvcanary_backends.cuda import plan, plan_entries, plan_offsets, scatter, verify, write
from kvcanary_backends.cuda._pack import KernelCache
from kvcanary_backends.cuda._toolchain import Spec

_BOOLS = (False, True)
SOURCES: tuple[tuple[int, bool], ...] = (
    (0, True), *((n, p) for n in range(1, MAX_REAL_KV_SOURCES + 1) for p in _BOOLS))
"""(number of sources, PARTIAL) pairs: with no source the mode does not matter."""

KEYS: dict[Op, tuple[KernelCache, list[tuple[Any, ...]]]] = {
    Op.VERIFY: (verify.KERNELS, [(c, n, p, v, verify.THREADS, False)
                                 for c in _BOOLS for n, p in SOURCES for v in _BOOLS]),
    Op.WRITE: (write.KERNELS, [(n, p, a, v, False, False, False)
                               for n, p in SOURCES for a in _BOOLS for v in _BOOLS]),
    Op.PLAN: (plan.KERNELS, [(lut, pool, False) for lut in _BOOLS for pool in _BOOLS]),
    Op.PLAN_OFFSETS: (plan_offsets.KERNELS, [(lut,) for lut in _BOOLS]),
    Op.PLAN_ENTRIES: (plan_entries.KERNELS, [(lut, pool, False) for lut in _BOOLS for pool in _BOOLS]),
    Op.SCATTER: (scatter.KERNELS, [()]),
}
"""The default specializations (every extension off): what preload loads."""

EXTENSION_KEYS: dict[Op, tuple[KernelCache, list[tuple[Any, ...]]]] = {
    Op.VERIFY: (verify.KERNELS, [(c, n, p, v, verify.THREADS, True)
                                 for c in _BOOLS for n, p in SOURCES[:2] for v in _BOOLS]),
    Op.WRITE: (write.KERNELS, [(n, p, a, v, slot, slot and lut, own)
                               for n, p in SOURCES[:2] for a in _BOOLS for v in _BOOLS
                               for slot, lut, own in ((True, False, False), (True, True, False), (False, False, True),
                                                      (True, False, True), (True, True, True))]),
    Op.PLAN: (plan.KERNELS, [(lut, pool, True) for lut in _BOOLS for pool in _BOOLS]),
    Op.PLAN_ENTRIES: (plan_entries.KERNELS, [(lut, pool, True) for lut in _BOOLS for pool in _BOOLS]),
}
"""The extensions' specializations CI compiles (others compile on first use; none is preloaded): each extension
define with every other define, the source count only at 0 and 1 (the extension code never touches the fold)."""

BENCH_VERIFY_KEYS: list[tuple[Any, ...]] = [(False, 0, True, v, 512, False) for v in _BOOLS]
"""SGLang's launch shape (512 threads) with 8- and 16-byte record loads, for the benchmark's comparison."""


def all_specs() -> list[Spec]:
    """Every distinct Spec: what CI compiles and what preload loads (plus the benchmark variants)."""
    out: dict[Spec, None] = {}
    for cache, keys in KEYS.values():
        for key in keys:
            out[cache.spec(*key)] = None
    for cache, keys in EXTENSION_KEYS.values():
        for key in keys:
            out[cache.spec(*key)] = None
    for key in BENCH_VERIFY_KEYS:
        out[verify.KERNELS.spec(*key)] = None
    return list(out)

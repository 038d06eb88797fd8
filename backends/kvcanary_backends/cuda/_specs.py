"""Every specialization the backend can launch, per operation (for :func:`backends.cuda.preload` and CI).

Nothing here is listed by hand: each operation's module declares its specializations on its
:class:`~kvcanary_backends.cuda._pack.KernelCache`, beside the kernel it attaches with
``@KERNELS.kernel(OP)``; the tables are read from the cuda kernels attached to the operations.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import kvcanary_backends.cuda as package
from kvcanary.operation import Operation, operations
from kvcanary_backends.cuda import verify
from kvcanary_backends.cuda._pack import KernelCache, cache_of
from kvcanary_backends.cuda._toolchain import Spec

Table = dict[Operation, tuple[KernelCache, list[tuple[Any, ...]]]]


def attached() -> dict[Operation, KernelCache]:
    """Each operation's kernel cache, found from the cuda kernel attached to it (every kernel module of the
    backend is imported first: importing one attaches its kernel)."""
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not info.name.startswith("_") and not info.ispkg:
            importlib.import_module(f"{package.__name__}.{info.name}")
    out: dict[Operation, KernelCache] = {}
    for op in operations():
        support = op.kernels.get("cuda")
        cache = cache_of(support.impl) if support is not None else None
        if cache is not None:
            out[op] = cache
    return out


KEYS: Table = {op: (cache, list(cache.preload)) for op, cache in attached().items()}
"""The default specializations (every extension off): what preload loads."""

EXTENSION_KEYS: Table = {op: (cache, list(cache.extensions)) for op, cache in attached().items() if cache.extensions}
"""The extensions' specializations CI compiles (others compile on first use; none is preloaded)."""

BENCH_VERIFY_KEYS: list[tuple[Any, ...]] = list(verify.BENCH_KEYS)
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

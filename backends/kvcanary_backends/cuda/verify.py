"""verify: the CUDA launch of ``kernels/verify.cu`` (semantics: backends/torch_ref/verify.py).

A persistent grid (``min(cdiv(capacity, 256), blocks that fit on the GPU)`` blocks of 256 threads) strides
over the active entries; the grid depends only on the plan's capacity, so the launch is capturable.
"""

from __future__ import annotations

from kvcanary.extensions import zero_slot_on
from kvcanary.ops.verify import VERIFY, VerifyLaunch
from kvcanary_backends.cuda import notes
from kvcanary_backends.cuda._pack import (
    BOOLS,
    SOURCES,
    Args,
    KernelCache,
    Launch,
    Shape,
    fold,
    prepare_launch,
    vec16,
)
from kvcanary_backends.cuda._toolchain import Spec, cdiv, launch

THREADS = 256

Key = tuple[bool, int, bool, bool, int, bool]  # check token, sources, partial, 16-byte records, threads, zero slot


def spec(check: bool, nsrc: int, partial: bool, vec: bool, threads: int = THREADS, zero: bool = False) -> Spec:
    """The specialization; the ZERO_SLOT_IN_LIVE_RANGE extension adds a define (off: today's exact Spec)."""
    return Spec("verify.cu", "kvc_verify", (
        ("KVC_THREADS", threads), ("KVC_CHECK_TOKEN", int(check)), ("KVC_NSRC", nsrc),
        ("KVC_PARTIAL", int(partial)), ("KVC_VEC16", int(vec)), *((("KVC_ZERO", 1),) if zero else ())), threads)


KERNELS = KernelCache(
    spec,
    preload=[(c, n, p, v, THREADS, False) for c in BOOLS for n, p in SOURCES for v in BOOLS],
    extensions=[(c, n, p, v, THREADS, True) for c in BOOLS for n, p in SOURCES[:2] for v in BOOLS],
)
"""Preloaded: every token check, source count and mode, record alignment; the zero-slot extension's CI subset
takes the source count only at 0 and 1 (the extension code never touches the fold)."""
BENCH_KEYS: list[Key] = [(False, 0, True, v, 512, False) for v in BOOLS]
"""SGLang's launch shape (512 threads) with 8- and 16-byte record loads, for the benchmark's comparison."""


def pack(call: VerifyLaunch, *, threads: int = THREADS, vec: bool | None = None) -> tuple[Key, int, Args]:
    """(specialization key, plan capacity, kernel arguments) of one launch."""
    ctx = call.context
    buf = ctx.canary_buf
    num_slots, stride = buf.shape
    nsrc, partial, extra = fold(ctx)
    ring = ctx.violation_ring
    slots = call.plan.verify_slot_indices
    cap = slots.shape[0]
    key: Key = (bool(call.check_verify_expected_token), nsrc, partial,
                vec16(stride) if vec is None else vec and vec16(stride), threads, zero_slot_on(call.extensions))
    args = (buf.data_ptr(), num_slots, stride, slots.data_ptr(), call.plan.verify_expected_tokens.data_ptr(),
            call.plan.verify_expected_positions.data_ptr(), call.plan.verify_prev_slot_indices.data_ptr(),
            call.plan.verify_num_valid.data_ptr(), call.plan.enable.data_ptr(), cap, ring.data_ptr(), ring.shape[0],
            ctx.violation_write_index.data_ptr(), ctx.slot_run_counter.data_ptr(), ctx.kernel_run_counter.data_ptr(),
            int(ctx.kernel_kind), *extra)
    return key, cap, args


def shape(key: Key, cap: int, max_blocks: int) -> Shape:
    """(grid x, grid y, threads, shared bytes): a persistent grid, no larger than the capacity needs."""
    threads = key[4]
    return max(1, min(cdiv(cap, threads), max_blocks)), 1, threads, 0


def prepare(call: VerifyLaunch) -> Launch:
    """The launch of ``call``, packed once (:attr:`kvcanary.registry.OpSupport.prepare`)."""
    key, cap, args = pack(call)
    return prepare_launch(KERNELS, call.context.canary_buf.get_device(), key, cap, args, shape)


@KERNELS.kernel(VERIFY, notes=notes(), prepare=prepare)
def verify(call: VerifyLaunch) -> None:
    prepare(call)()


def verify_variant(call: VerifyLaunch, *, grid: int | None, threads: int, vec: bool) -> None:
    """The same kernel with another launch shape (benchmarks: SGLang's 64 x 512 with 8-byte loads, ...).

    ``grid=None`` sizes the grid as :func:`verify` does.
    """
    key, cap, args = pack(call, threads=threads, vec=vec)
    dev = call.context.canary_buf.get_device()
    kernel = KERNELS.get(dev, key)
    gx, gy, block, shmem = shape(key, cap, kernel.max_blocks)
    launch(kernel, dev, (gx if grid is None else grid, gy, block, shmem), args)

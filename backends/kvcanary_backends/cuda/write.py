"""write: the CUDA launch of ``kernels/write.cu`` (semantics: backends/torch_ref/write.py).

Grid ``(cdiv(write_req_capacity, 4), 1 + fold rows)`` of 4 warps: row 0 holds one chain warp per request row of
the write plan; with real-KV sources, ``fold rows = clamp(cdiv(tokens, 2048), 1, 64)`` rows of fold blocks
hash the strips. Every size comes from shapes (capacity, token count), so the launch is capturable.

Four chain warps per block, one per SM sub-partition's scheduler: more warps put two chains on one scheduler
and long requests slow down; one-token requests pay a little for the extra blocks; a single long chain does
not care (the sweep: docs/tuning.md, "cuda backend: write").

``VARIANT`` picks ``KVC_WRITE_VARIANT`` of ``kernels/write.cu`` (0: the kernel before the decode candidates; bit 1
the lean decode chain, bit 2 the fold's early strips, bit 4 with it the one-token fold; 7, all three, is the
default: the fastest decode write, docs/tuning.md), candidates ``benchmarks/bench_write_variants.py`` times side by
side (:func:`prepare_variant` launches any of them); each stores the same bytes.
"""

from __future__ import annotations

import functools
import threading

from kvcanary.extensions import write_owner_on, write_slot_on
from kvcanary.ops.write import WRITE, WriteLaunch
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
    ptr,
    vec16,
)
from kvcanary_backends.cuda._toolchain import Spec, cdiv, once

Key = tuple[int, bool, bool, bool, bool, bool, bool]
"""sources, partial, input assert, 16-byte records, slot check, its LUT, owner check."""


VARIANTS = (0, 1, 2, 3, 6, 7)
"""``KVC_WRITE_VARIANT`` values ``kernels/write.cu`` takes (bits: 1 the lean decode chain, 2 early strips, 4 the
one-token fold, only with 2)."""
VARIANT = 7  # the default kernels' KVC_WRITE_VARIANT: making a candidate the default is this line
WARPS = 4  # KVC_WRITE_WARPS in kernels/write.cu: requests per chain block
THREADS = 32 * WARPS
FOLD_TOKENS_PER_ROW = 2048
MAX_FOLD_ROWS = 64


def fold_rows(nsrc: int, ntok: int) -> int:
    """Rows of fold blocks: none without sources, else about one per 2048 tokens (at most 64)."""
    return 0 if nsrc == 0 else max(1, min(cdiv(ntok, FOLD_TOKENS_PER_ROW), MAX_FOLD_ROWS))


def spec(nsrc: int, partial: bool, assert_inputs: bool, vec: bool, slot_check: bool = False,
         slot_lut: bool = False, owner_check: bool = False, variant: int | None = None) -> Spec:
    """The specialization; the WRITE_SLOT_MISMATCH and WRITE_SLOT_OWNER_MISMATCH extensions add defines (off:
    today's exact Spec), and so does a ``variant`` other than 0 (None: :data:`VARIANT`)."""
    v = VARIANT if variant is None else variant
    if v not in VARIANTS:
        raise ValueError(f"variant: KVC_WRITE_VARIANT must be one of {VARIANTS}, not {v!r}")
    ext: tuple[tuple[str, int], ...] = (("KVC_SLOT_CHECK", 1), ("KVC_SLOT_LUT", int(slot_lut))) if slot_check else ()
    ext += (("KVC_OWNER_CHECK", 1),) if owner_check else ()
    ext += (("KVC_WRITE_VARIANT", v),) if v else ()
    return Spec("write.cu", "kvc_write", (
        ("KVC_NSRC", nsrc), ("KVC_PARTIAL", int(partial)), ("KVC_ASSERT", int(assert_inputs)),
        ("KVC_VEC16", int(vec)), ("KVC_WRITE_WARPS", WARPS), *ext), THREADS)


_EXTENSION_DEFINES = ((True, False, False), (True, True, False), (False, False, True), (True, False, True),
                      (True, True, True))
"""(slot check, its LUT, owner check) of the extensions' CI subset: each extension with every other define."""
KERNELS = KernelCache(
    spec,
    preload=[(n, p, a, v, False, False, False) for n, p in SOURCES for a in BOOLS for v in BOOLS],
    extensions=[(n, p, a, v, slot, slot and lut, own) for n, p in SOURCES[:2] for a in BOOLS for v in BOOLS
                for slot, lut, own in _EXTENSION_DEFINES],
)


def pack(call: WriteLaunch) -> tuple[Key, tuple[int, int], Args]:
    """(specialization key, (request capacity, token count), kernel arguments) of one launch."""
    ctx = call.context
    buf = ctx.canary_buf
    num_slots, stride = buf.shape
    nsrc, partial, extra = fold(ctx)
    ring = ctx.violation_ring
    on = bool(call.enable_write_input_assert)
    seeds = call.plan.write_seed_slot_indices
    cap = seeds.shape[0]
    slot_args: Args = ()
    lut = call.full_to_swa_index_mapping
    check = write_slot_on(call.extensions)
    if check:
        rpi, r2t = call.req_pool_indices, call.req_to_token
        assert rpi is not None and r2t is not None
        slot_args = (rpi.data_ptr(), rpi.shape[0], r2t.data_ptr(), r2t.shape[0], r2t.shape[1], ptr(lut),
                     0 if lut is None else lut.shape[0])
    own = write_owner_on(call.extensions)
    if own:
        rpi, owner = call.req_pool_indices, call.slot_owner
        assert rpi is not None and owner is not None
        slot_args += (rpi.data_ptr(), rpi.shape[0], owner.data_ptr())
    key: Key = (nsrc, partial, on, vec16(stride), check, check and lut is not None, own)
    args = (buf.data_ptr(), num_slots, stride, call.plan.write_offsets.data_ptr(), seeds.data_ptr(),
            call.plan.write_num_valid_reqs.data_ptr(), cap, call.input_ids.data_ptr(), call.positions.data_ptr(),
            call.out_cache_loc.data_ptr(), call.input_ids.shape[0], ptr(call.expected_input_tokens) if on else 0,
            ptr(call.expected_input_positions) if on else 0, ctx.enable_chain_position_assert.data_ptr(),
            *slot_args, ring.data_ptr(), ring.shape[0], ctx.violation_write_index.data_ptr(),
            ctx.slot_run_counter.data_ptr(), ctx.kernel_run_counter.data_ptr(), int(ctx.kernel_kind), *extra)
    return key, (cap, call.input_ids.shape[0]), args


def shape(key: Key, sizes: tuple[int, int], max_blocks: int) -> Shape:
    """(grid x, grid y, threads, shared bytes): a chain warp per request row, then the fold rows."""
    cap, ntok = sizes
    return max(cdiv(cap, WARPS), 1), 1 + fold_rows(key[0], ntok), THREADS, 0


def prepare(call: WriteLaunch) -> Launch:
    """The launch of ``call``, packed once (:attr:`kvcanary.registry.OpSupport.prepare`)."""
    key, sizes, args = pack(call)
    return prepare_launch(KERNELS, call.context.canary_buf.get_device(), key, sizes, args, shape)


_VARIANT_CACHES: dict[int, KernelCache] = {}
_variant_lock = threading.Lock()


def variant_kernels(variant: int) -> KernelCache:
    """A kernel cache whose every specialization is built with ``KVC_WRITE_VARIANT=variant``."""
    if variant not in VARIANTS:
        raise ValueError(f"variant: KVC_WRITE_VARIANT must be one of {VARIANTS}, not {variant!r}")
    return once(_VARIANT_CACHES, variant, _variant_lock,
                lambda: KernelCache(functools.partial(spec, variant=variant)))


def prepare_variant(call: WriteLaunch, variant: int) -> Launch:
    """:func:`prepare` with the kernel of ``variant`` (the default's packing and grid; the benchmark's
    candidates)."""
    key, sizes, args = pack(call)
    return prepare_launch(variant_kernels(variant), call.context.canary_buf.get_device(), key, sizes, args, shape)


@KERNELS.kernel(WRITE, notes=notes(), prepare=prepare)
def write(call: WriteLaunch) -> None:
    prepare(call)()

"""write: the CUDA launch of ``kernels/write.cu`` (semantics: backends/torch_ref/write.py).

Grid ``(cdiv(write_req_capacity, 4), 1 + fold rows)`` of 4 warps: row 0 holds one chain warp per request row of
the write plan; with real-KV sources, ``fold rows = clamp(cdiv(tokens, 2048), 1, 64)`` rows of fold blocks
hash the strips. Every size comes from shapes (capacity, token count), so the launch is capturable.

Four chain warps per block, one per SM sub-partition's scheduler: more warps put two chains on one scheduler
and long requests slow down; one-token requests pay a little for the extra blocks; a single long chain does
not care (the sweep: docs/tuning.md, "cuda backend: write").

Each launch picks ``KVC_WRITE_VARIANT`` of ``kernels/write.cu`` from its shapes (:func:`variant_for`, on the host
when the launch is prepared, part of its specialization key): :data:`DECODE_VARIANT` (7: bit 1 the lean decode
chain, bit 2 the fold's early strips, bit 4 with it the one-token fold; the fastest decode write) where the launch
has at most one token per request row, :data:`LONG_VARIANT` (0: the kernel before the decode candidates) where it
has more (prefill chunks, long chains: docs/tuning.md, "cuda backend: write"). Candidates
``benchmarks/bench_write_variants.py`` times side by side are launched by :func:`prepare_variant`; every variant
stores the same bytes.
"""

from __future__ import annotations

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
from kvcanary_backends.cuda._toolchain import Spec, cdiv

Key = tuple[int, bool, bool, bool, bool, bool, bool, int]
"""sources, partial, input assert, 16-byte records, slot check, its LUT, owner check, ``KVC_WRITE_VARIANT``."""


VARIANTS = (0, 1, 2, 3, 6, 7)
"""``KVC_WRITE_VARIANT`` values ``kernels/write.cu`` takes (bits: 1 the lean decode chain, 2 early strips, 4 the
one-token fold, only with 2)."""
DECODE_VARIANT = 7
"""``KVC_WRITE_VARIANT`` of decode-shaped launches (:func:`variant_for`): the fastest decode write."""
LONG_VARIANT = 0
"""``KVC_WRITE_VARIANT`` of launches with more tokens than request rows (:func:`variant_for`): no one-token test
per tile, the strips' range check after the chain, the fold's early exit kept."""
DECODE_TOKENS_PER_ROW = 1
"""The most tokens per request row (``out_cache_loc``'s length over the write plan's capacity) a launch may have
to run :data:`DECODE_VARIANT`. Variant 7 gains only on one-token requests (the lean chain: a first tile advancing
at most one token; the one-token fold: four one-token requests in a fold column). More tokens than rows means a
request of two or more, whose chain walks the tile path, and a launch lasts as long as its slowest chain: variant
7 makes that no faster and a little slower (its per-tile test, the range check ahead of the chain, no early exit
while early strips are in flight). The host sees no more than shapes (the valid requests are a device value, the
capacity counts padding rows): a short prefill under a larger capacity counts as decode-shaped. Figures:
docs/tuning.md, "cuda backend: write"."""
WARPS = 4  # KVC_WRITE_WARPS in kernels/write.cu: requests per chain block
THREADS = 32 * WARPS
FOLD_TOKENS_PER_ROW = 2048
MAX_FOLD_ROWS = 64


def fold_rows(nsrc: int, ntok: int) -> int:
    """Rows of fold blocks: none without sources, else about one per 2048 tokens (at most 64)."""
    return 0 if nsrc == 0 else max(1, min(cdiv(ntok, FOLD_TOKENS_PER_ROW), MAX_FOLD_ROWS))


def variant_for(ntok: int, rows: int) -> int:
    """The ``KVC_WRITE_VARIANT`` of a launch of ``ntok`` tokens over ``rows`` request rows: :data:`DECODE_VARIANT`
    up to :data:`DECODE_TOKENS_PER_ROW` tokens a row, else :data:`LONG_VARIANT` (shapes only: capturable)."""
    return DECODE_VARIANT if ntok <= DECODE_TOKENS_PER_ROW * rows else LONG_VARIANT


def spec(nsrc: int, partial: bool, assert_inputs: bool, vec: bool, slot_check: bool = False,
         slot_lut: bool = False, owner_check: bool = False, variant: int | None = None) -> Spec:
    """The specialization; the WRITE_SLOT_MISMATCH and WRITE_SLOT_OWNER_MISMATCH extensions add defines (off:
    today's exact Spec), and so does a ``variant`` other than 0 (None: :data:`DECODE_VARIANT`)."""
    v = DECODE_VARIANT if variant is None else variant
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
_PICKED = (LONG_VARIANT, DECODE_VARIANT)
"""The variants :func:`variant_for` picks: each specialization is preloaded and compiled by CI in both."""
KERNELS = KernelCache(
    spec,
    preload=[(n, p, a, v, False, False, False, w) for n, p in SOURCES for a in BOOLS for v in BOOLS for w in _PICKED],
    extensions=[(n, p, a, v, slot, slot and lut, own, w) for n, p in SOURCES[:2] for a in BOOLS for v in BOOLS
                for slot, lut, own in _EXTENSION_DEFINES for w in _PICKED],
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
    ntok = call.input_ids.shape[0]
    key: Key = (nsrc, partial, on, vec16(stride), check, check and lut is not None, own, variant_for(ntok, cap))
    args = (buf.data_ptr(), num_slots, stride, call.plan.write_offsets.data_ptr(), seeds.data_ptr(),
            call.plan.write_num_valid_reqs.data_ptr(), cap, call.input_ids.data_ptr(), call.positions.data_ptr(),
            call.out_cache_loc.data_ptr(), ntok, ptr(call.expected_input_tokens) if on else 0,
            ptr(call.expected_input_positions) if on else 0, ctx.enable_chain_position_assert.data_ptr(),
            *slot_args, ring.data_ptr(), ring.shape[0], ctx.violation_write_index.data_ptr(),
            ctx.slot_run_counter.data_ptr(), ctx.kernel_run_counter.data_ptr(), int(ctx.kernel_kind), *extra)
    return key, (cap, ntok), args


def shape(key: Key, sizes: tuple[int, int], max_blocks: int) -> Shape:
    """(grid x, grid y, threads, shared bytes): a chain warp per request row, then the fold rows."""
    cap, ntok = sizes
    return max(cdiv(cap, WARPS), 1), 1 + fold_rows(key[0], ntok), THREADS, 0


def prepare(call: WriteLaunch) -> Launch:
    """The launch of ``call``, packed once (:attr:`kvcanary.registry.OpSupport.prepare`)."""
    key, sizes, args = pack(call)
    return prepare_launch(KERNELS, call.context.canary_buf.get_device(), key, sizes, args, shape)


def prepare_variant(call: WriteLaunch, variant: int) -> Launch:
    """:func:`prepare` with the kernel of ``variant``, whatever :func:`variant_for` picks (the default's packing
    and grid; the benchmark's candidates)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant: KVC_WRITE_VARIANT must be one of {VARIANTS}, not {variant!r}")
    key, sizes, args = pack(call)
    return prepare_launch(KERNELS, call.context.canary_buf.get_device(), (*key[:-1], variant), sizes, args, shape)


@KERNELS.kernel(WRITE, notes=notes(), prepare=prepare)
def write(call: WriteLaunch) -> None:
    prepare(call)()

"""plan_entries: stage 2 alone, ``kernels/plan_entries.cu`` (semantics: backends/torch_ref/plan_entries.py).

Grid: ``min(max_tiles(bs, capacity), blocks that fit)`` blocks of 256 threads, 4 entries each per round (fixed
by shapes: capturable). With no entry capacity or no batch row nothing can be written, and nothing is
launched (the reference does nothing either).
"""

from __future__ import annotations

from kvcanary.extensions import zero_slot_on
from kvcanary.ops.plan_entries import PLAN_ENTRIES, PlanEntriesLaunch
from kvcanary_backends.cuda import notes
from kvcanary_backends.cuda._pack import BOOLS, Args, KernelCache, Launch, Shape, prepare_launch, ptr
from kvcanary_backends.cuda._toolchain import Spec, cdiv

THREADS = 256
ENTRIES_PER_THREAD = 4  # KVC_PLAN_EPT (kEntriesPerThread) in kernels/plan_common.cuh
TILE_ROWS_MAX = 1024  # kTileRowsMax in kernels/plan_common.cuh


def shared_bytes(bs: int) -> int:
    """Dynamic shared memory: the tile path's four per-row arrays up to TILE_ROWS_MAX rows, else the offsets."""
    return 32 * max(bs, 1) if bs <= TILE_ROWS_MAX else 8 * bs


def max_tiles(bs: int, capacity: int) -> int:
    """The most tiles of THREADS * ENTRIES_PER_THREAD entries a plan can have: tiles never span two rows, so
    each row adds at most one partial tile to the capacity's."""
    return cdiv(capacity, THREADS * ENTRIES_PER_THREAD) + bs


Key = tuple[bool, bool, bool]  # LUT, token pool, zero-slot marks


def plan_kernels(source: str, entry: str) -> KernelCache:
    """The specializations of a plan kernel (this stage alone, or the fused plan): LUT, token pool, and the
    ZERO_SLOT_IN_LIVE_RANGE extension's marks (a define only when on: off is today's exact Spec)."""

    def spec(has_lut: bool, has_pool: bool, mark_zero: bool = False) -> Spec:
        return Spec(source, entry, (
            ("KVC_THREADS", THREADS), ("KVC_HAS_LUT", int(has_lut)), ("KVC_HAS_POOL", int(has_pool)),
            *((("KVC_MARK_ZERO", 1),) if mark_zero else ())), THREADS)

    return KernelCache(spec, preload=[(lut, pool, False) for lut in BOOLS for pool in BOOLS],
                       extensions=[(lut, pool, True) for lut in BOOLS for pool in BOOLS])


KERNELS = plan_kernels("plan_entries.cu", "kvc_plan_entries")


def pack(call: PlanEntriesLaunch) -> tuple[Key, tuple[int, int], Args]:
    """(specialization key, (batch size, entry capacity), kernel arguments) of one launch."""
    lut, pool = call.full_to_swa_index_mapping, call.req_to_verify_expected_tokens
    bs = call.req_pool_indices.shape[0]
    cap = call.out_verify_slot_indices.shape[0]
    rows, cols = call.req_to_token.shape
    prow, pcol = pool.shape if pool is not None else (0, 0)
    args = (call.req_pool_indices.data_ptr(), call.prefix_lens.data_ptr(), call.req_to_token.data_ptr(), rows, cols,
            ptr(lut), lut.shape[0] if lut is not None else 0, call.swa_window_size, bs,
            call.verify_offsets_scratch.data_ptr(), call.verify_enable.data_ptr(), cap,
            call.out_verify_slot_indices.data_ptr(), call.out_verify_expected_tokens.data_ptr(),
            call.out_verify_expected_positions.data_ptr(), call.out_verify_prev_slot_indices.data_ptr(), ptr(pool),
            prow, pcol, ptr(call.req_to_verify_expected_tokens_valid_lens) if pool is not None else 0,
            call.kv_token_id_vs_position_offset)
    return (lut is not None, pool is not None, zero_slot_on(call.extensions)), (bs, cap), args


def shape(key: Key, sizes: tuple[int, int], max_blocks: int) -> Shape | None:
    """(grid x, grid y, threads, shared bytes), or None: with no capacity or no batch row nothing is written."""
    bs, cap = sizes
    if cap == 0 or bs == 0:
        return None
    return max(1, min(max_tiles(bs, cap), max_blocks)), 1, THREADS, shared_bytes(bs)


def prepare(call: PlanEntriesLaunch) -> Launch:
    """The launch of ``call``, packed once (:attr:`kvcanary.registry.OpSupport.prepare`)."""
    key, sizes, args = pack(call)
    return prepare_launch(KERNELS, call.verify_offsets_scratch.get_device(), key, sizes, args, shape)


@KERNELS.kernel(PLAN_ENTRIES, notes=notes(), prepare=prepare)
def plan_entries(call: PlanEntriesLaunch) -> None:
    prepare(call)()

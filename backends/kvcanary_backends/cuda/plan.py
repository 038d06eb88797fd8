"""plan: both plan stages in one launch of ``kernels/plan.cu`` (semantics: backends/torch_ref/plan.py).

Every block scans the batch rows' verify lengths in shared memory itself, so the fused launch needs no scratch
and no second launch; it still fills ``verify_offsets_scratch`` when the plan has one (as the reference does).
Grid: block 0 (stage-1 outputs) + ``min(max_tiles(bs, capacity), resident blocks - 1)`` entry blocks (256
threads, 4 entries each per round), so every block is resident from the start. It depends only on shapes, so
the launch is capturable. Tiles never span two rows, so a batch has up to ``cdiv(capacity, 1024) + bs`` of
them: sizing the grid from the capacity alone left a handful of blocks for many short rows. 256 threads x 4
entries: larger tiles win only where every row is a multiple of the tile, and lose elsewhere, since each
row's last tile leaves most of the block idle (the measurements: docs/tuning.md, "cuda backend: fused plan").
"""

from __future__ import annotations

from kvcanary.extensions import zero_slot_on
from kvcanary.ops.plan import PLAN, PlanLaunch
from kvcanary_backends.cuda import notes
from kvcanary_backends.cuda._pack import Args, Launch, Shape, prepare_launch, ptr
from kvcanary_backends.cuda.plan_entries import THREADS, Key, max_tiles, plan_kernels, shared_bytes

KERNELS = plan_kernels("plan.cu", "kvc_plan")


def pack(call: PlanLaunch) -> tuple[Key, tuple[int, int], Args]:
    """(specialization key, (batch size, entry capacity), kernel arguments) of one launch."""
    vp, wp = call.verify_plan_out, call.write_plan_out
    lut, pool = call.full_to_swa_index_mapping, call.req_to_verify_expected_tokens
    bs = call.req_pool_indices.shape[0]
    cap = vp.verify_slot_indices.shape[0]
    rows, cols = call.req_to_token.shape
    prow, pcol = pool.shape if pool is not None else (0, 0)
    key: Key = (lut is not None, pool is not None, zero_slot_on(call.extensions))
    args = (call.req_pool_indices.data_ptr(), call.prefix_lens.data_ptr(), call.extend_seq_lens.data_ptr(),
            call.req_to_token.data_ptr(), rows, cols, ptr(lut), lut.shape[0] if lut is not None else 0,
            call.swa_window_size, bs, call.verify_capacity, cap, vp.verify_slot_indices.data_ptr(),
            vp.verify_expected_tokens.data_ptr(), vp.verify_expected_positions.data_ptr(),
            vp.verify_prev_slot_indices.data_ptr(), vp.verify_num_valid.data_ptr(), vp.enable.data_ptr(),
            ptr(vp.verify_offsets_scratch), wp.write_offsets.data_ptr(), wp.write_offsets.shape[0],
            wp.write_seed_slot_indices.data_ptr(), wp.write_num_valid_reqs.data_ptr(), ptr(pool), prow, pcol,
            ptr(call.req_to_verify_expected_tokens_valid_lens) if pool is not None else 0,
            call.kv_token_id_vs_position_offset)
    return key, (bs, cap), args


def shape(key: Key, sizes: tuple[int, int], max_blocks: int) -> Shape:
    """(grid x, grid y, threads, shared bytes): block 0 for stage 1, then the entry blocks, all resident at
    once (a block past the resident ones would start only when block 0 ends, and then run its tiles alone)."""
    bs, cap = sizes
    return 1 + max(1, min(max_tiles(bs, cap), max_blocks - 1)), 1, THREADS, shared_bytes(bs)


def prepare(call: PlanLaunch) -> Launch:
    """The launch of ``call``, packed once (:attr:`kvcanary.registry.OpSupport.prepare`)."""
    key, sizes, args = pack(call)
    return prepare_launch(KERNELS, call.verify_plan_out.verify_slot_indices.get_device(), key, sizes, args, shape)


@KERNELS.kernel(PLAN, notes=notes("one launch for both stages"), prepare=prepare)
def plan(call: PlanLaunch) -> None:
    prepare(call)()

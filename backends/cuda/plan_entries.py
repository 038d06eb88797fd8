"""plan_entries: stage 2 alone, ``kernels/plan_entries.cu`` (semantics: backends/torch_ref/plan_entries.py).

Grid: ``min(max_tiles(bs, capacity), blocks that fit)`` blocks of 256 threads, 4 entries each per round (fixed
by shapes: capturable). With no entry capacity or no batch row nothing can be written, and nothing is
launched (the reference does nothing either).
"""

from __future__ import annotations

import torch

from kvcanary.backends.cuda._pack import Args, KernelCache, Shape, ptr
from kvcanary.backends.cuda._toolchain import Spec, cdiv, launch

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


Key = tuple[bool, bool]  # LUT, token pool


def spec(has_lut: bool, has_pool: bool) -> Spec:
    return Spec("plan_entries.cu", "kvc_plan_entries", (
        ("KVC_THREADS", THREADS), ("KVC_HAS_LUT", int(has_lut)), ("KVC_HAS_POOL", int(has_pool))), THREADS)


KERNELS = KernelCache(spec)


def pack(*, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor, req_to_token: torch.Tensor,
         full_to_swa_index_mapping: torch.Tensor | None, verify_offsets_scratch: torch.Tensor,
         verify_enable: torch.Tensor, req_to_verify_expected_tokens: torch.Tensor | None,
         req_to_verify_expected_tokens_valid_lens: torch.Tensor | None, out_verify_slot_indices: torch.Tensor,
         out_verify_expected_tokens: torch.Tensor, out_verify_expected_positions: torch.Tensor,
         out_verify_prev_slot_indices: torch.Tensor, kv_token_id_vs_position_offset: int,
         swa_window_size: int) -> tuple[Key, tuple[int, int], Args]:
    """(specialization key, (batch size, entry capacity), kernel arguments) of one launch."""
    lut, pool = full_to_swa_index_mapping, req_to_verify_expected_tokens
    bs = req_pool_indices.shape[0]
    cap = out_verify_slot_indices.shape[0]
    rows, cols = req_to_token.shape
    prow, pcol = pool.shape if pool is not None else (0, 0)
    args = (req_pool_indices.data_ptr(), prefix_lens.data_ptr(), req_to_token.data_ptr(), rows, cols, ptr(lut),
            lut.shape[0] if lut is not None else 0, swa_window_size, bs, verify_offsets_scratch.data_ptr(),
            verify_enable.data_ptr(), cap, out_verify_slot_indices.data_ptr(), out_verify_expected_tokens.data_ptr(),
            out_verify_expected_positions.data_ptr(), out_verify_prev_slot_indices.data_ptr(), ptr(pool), prow, pcol,
            ptr(req_to_verify_expected_tokens_valid_lens) if pool is not None else 0, kv_token_id_vs_position_offset)
    return (lut is not None, pool is not None), (bs, cap), args


def shape(key: Key, sizes: tuple[int, int], max_blocks: int) -> Shape | None:
    """(grid x, grid y, threads, shared bytes), or None: with no capacity or no batch row nothing is written."""
    bs, cap = sizes
    if cap == 0 or bs == 0:
        return None
    return max(1, min(max_tiles(bs, cap), max_blocks)), 1, THREADS, shared_bytes(bs)


def plan_entries(*, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor, req_to_token: torch.Tensor,
                 full_to_swa_index_mapping: torch.Tensor | None, verify_offsets_scratch: torch.Tensor,
                 verify_enable: torch.Tensor, req_to_verify_expected_tokens: torch.Tensor | None,
                 req_to_verify_expected_tokens_valid_lens: torch.Tensor | None, out_verify_slot_indices: torch.Tensor,
                 out_verify_expected_tokens: torch.Tensor, out_verify_expected_positions: torch.Tensor,
                 out_verify_prev_slot_indices: torch.Tensor, kv_token_id_vs_position_offset: int,
                 swa_window_size: int) -> None:
    key, sizes, args = pack(
        req_pool_indices=req_pool_indices, prefix_lens=prefix_lens, req_to_token=req_to_token,
        full_to_swa_index_mapping=full_to_swa_index_mapping, verify_offsets_scratch=verify_offsets_scratch,
        verify_enable=verify_enable, req_to_verify_expected_tokens=req_to_verify_expected_tokens,
        req_to_verify_expected_tokens_valid_lens=req_to_verify_expected_tokens_valid_lens,
        out_verify_slot_indices=out_verify_slot_indices, out_verify_expected_tokens=out_verify_expected_tokens,
        out_verify_expected_positions=out_verify_expected_positions,
        out_verify_prev_slot_indices=out_verify_prev_slot_indices,
        kv_token_id_vs_position_offset=kv_token_id_vs_position_offset, swa_window_size=swa_window_size)
    if shape(key, sizes, 1) is None:
        return
    dev = verify_offsets_scratch.get_device()
    kernel = KERNELS.get(dev, key)
    s = shape(key, sizes, kernel.max_blocks)
    assert s is not None
    launch(kernel, dev, s, args)

"""plan: both stages in one launch, filling the VerifyPlan and WritePlan like ``backends/torch_ref/plan.py``.

No program can wait for another, and a user-built plan may have no scratch, so each program derives what
it needs itself: it scans the batch rows (chunks of ``CHUNK`` rows in registers) for their verify lengths.
The verify entries are cut into tiles of ``TILE`` entries that never span two requests (a tile is a run of
consecutive positions of one ``req_to_token`` row: coalesced reads, no per-entry search); a persistent
grid strides over the tiles (tile ``t`` goes to program ``t mod nprog``), and a tile finds its request by
counting the rows of its chunk whose inclusive tile count does not exceed it. Program 0 also writes stage
1's outputs (write offsets, seeds, counts, the scratch when the plan has one). On overflow (more entries
than ``verify_capacity``) no entry is written.
"""

from __future__ import annotations

import torch
import triton.language as tl

from backends.triton._jit import TUNING, cdiv, kernel, persistent_grid
from backends.triton._plan_common import chunk_rows, expected_token, offsets_stage, read_slot, window_start
from kvcanary.plans import VerifyPlan, WritePlan

_INTS = ["bs", "capacity", "write_offsets_len", "r2t_rows", "r2t_cols", "lut_len", "pool_rows", "pool_cols",
         "token_offset", "swa"]


@kernel(do_not_specialize=_INTS)
def _plan_kernel(
    rpi: tl.tensor, prefix: tl.tensor, extend: tl.tensor, bs: tl.tensor, swa: tl.tensor,
    r2t: tl.tensor, r2t_rows: tl.tensor, r2t_cols: tl.tensor, lut: tl.tensor, lut_len: tl.tensor,
    pool: tl.tensor, pool_rows: tl.tensor, pool_cols: tl.tensor, valid_lens: tl.tensor, token_offset: tl.tensor,
    capacity: tl.tensor, out_slots: tl.tensor, out_tokens: tl.tensor, out_positions: tl.tensor, out_prev: tl.tensor,
    num_valid_out: tl.tensor, enable_out: tl.tensor, scratch: tl.tensor,
    write_offsets: tl.tensor, write_offsets_len: tl.tensor, seeds_out: tl.tensor, num_reqs_out: tl.tensor,
    HAS_LUT: tl.constexpr, HAS_POOL: tl.constexpr, HAS_SCRATCH: tl.constexpr,
    CHUNK: tl.constexpr, TILE: tl.constexpr,
) -> None:
    pid = tl.program_id(0).to(tl.int64)
    nprog = tl.num_programs(0).to(tl.int64)
    if pid == 0:
        offsets_stage(rpi, prefix, extend, bs, swa, r2t, r2t_rows, r2t_cols, lut, lut_len, capacity, scratch,
                      write_offsets, write_offsets_len, seeds_out, num_valid_out, enable_out, num_reqs_out,
                      HAS_LUT, HAS_SCRATCH, True, CHUNK)
    # pass 1: the total decides overflow (then no entry is written, and every row holds <= capacity)
    total = (bs * 0).to(tl.int64)
    for c in range(0, bs, CHUNK):
        _rows, _rm, _rp, _pl, vlen = chunk_rows(rpi, prefix, bs, swa, c, CHUNK)
        total += tl.sum(vlen)
    if total <= capacity:
        # pass 2: this program's tiles, t = pid (mod nprog), chunk by chunk with running bases
        lanes = tl.arange(0, TILE)
        tile_base = (bs * 0).to(tl.int64)
        entry_base = (bs * 0).to(tl.int64)
        for c in range(0, bs, CHUNK):
            _rows, _rm, _rp, _pl, vlen = chunk_rows(rpi, prefix, bs, swa, c, CHUNK)
            ntiles = (vlen + TILE - 1) // TILE
            tiles_incl = tl.cumsum(ntiles, 0)
            entries_incl = tl.cumsum(vlen, 0)
            chunk_tiles = tl.sum(ntiles)
            # first t >= tile_base with t = pid (mod nprog); every operand is non-negative, where the
            # interpreter's % (Python's) and the compiled one (C's) agree
            first = tile_base + (pid + nprog - tile_base % nprog) % nprog
            for t in range(first, tile_base + chunk_tiles, nprog):
                before = tiles_incl <= t - tile_base  # exactly the chunk's rows before the tile's row
                row = c + tl.sum(before.to(tl.int32))
                e0 = entry_base + tl.max(tl.where(before, entries_incl, 0), 0)
                k = t - tile_base - tl.max(tl.where(before, tiles_incl, 0), 0)
                rp = tl.load(rpi + row)
                pl = tl.load(prefix + row)
                ws = window_start(pl, swa)
                j = k * TILE + lanes
                m = j < pl - ws
                pos = ws + j
                slot = read_slot(r2t, r2t_rows, r2t_cols, lut, lut_len, rp, pos, m, HAS_LUT)
                prev = tl.where(pos > 0, read_slot(r2t, r2t_rows, r2t_cols, lut, lut_len, rp, pos - 1,
                                                   m & (pos > 0), HAS_LUT), -1)
                vl = 0
                if HAS_POOL:
                    vl = tl.load(valid_lens + row)
                tok = expected_token(pool, pool_rows, pool_cols, vl, rp, pos, token_offset, m, HAS_POOL)
                e = e0 + j
                tl.store(out_slots + e, slot, mask=m)
                tl.store(out_prev + e, prev, mask=m)
                tl.store(out_positions + e, pos, mask=m)
                tl.store(out_tokens + e, tok, mask=m)
            tile_base += chunk_tiles
            entry_base += tl.sum(vlen)


def plan(
    *,
    verify_plan_out: VerifyPlan,
    write_plan_out: WritePlan,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    swa_window_size: int,
    full_to_swa_index_mapping: torch.Tensor | None,
    verify_capacity: int,
    req_to_verify_expected_tokens: torch.Tensor | None,
    req_to_verify_expected_tokens_valid_lens: torch.Tensor | None,
    kv_token_id_vs_position_offset: int,
) -> None:
    """Launch the fused plan kernel (capture-safe: grid from capacities and shapes, no host sync)."""
    vp, wp = verify_plan_out, write_plan_out
    bs = int(req_pool_indices.shape[0])
    capacity = int(vp.verify_slot_indices.shape[0])
    lut = full_to_swa_index_mapping
    pool = req_to_verify_expected_tokens
    valid = req_to_verify_expected_tokens_valid_lens
    scratch = vp.verify_offsets_scratch
    tile = TUNING["plan_tile"]
    grid = (persistent_grid(req_pool_indices.device, cdiv(capacity, tile) + bs, TUNING["plan_waves"]),)
    _plan_kernel[grid](
        req_pool_indices, prefix_lens, extend_seq_lens, bs, int(swa_window_size),
        req_to_token, int(req_to_token.shape[0]), int(req_to_token.shape[1]),
        prefix_lens if lut is None else lut, 0 if lut is None else int(lut.shape[0]),
        req_to_token if pool is None else pool, 0 if pool is None else int(pool.shape[0]),
        0 if pool is None else int(pool.shape[1]), prefix_lens if valid is None else valid,
        int(kv_token_id_vs_position_offset),
        capacity, vp.verify_slot_indices, vp.verify_expected_tokens, vp.verify_expected_positions,
        vp.verify_prev_slot_indices, vp.verify_num_valid, vp.enable, prefix_lens if scratch is None else scratch,
        wp.write_offsets, int(wp.write_offsets.shape[0]), wp.write_seed_slot_indices, wp.write_num_valid_reqs,
        HAS_LUT=lut is not None, HAS_POOL=pool is not None, HAS_SCRATCH=scratch is not None,
        CHUNK=TUNING["plan_chunk"], TILE=tile, num_warps=TUNING["plan_warps"],
    )

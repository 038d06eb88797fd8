"""plan: both stages in one launch, filling the VerifyPlan and WritePlan like ``backends/torch_ref/plan.py``.

No program can wait for another, and a user-built plan may have no scratch, so each program derives what
it needs itself. Grid ``(G + 1, Y)``, from shapes only: program ``(x, y)`` with ``x < G`` owns the batch
rows ``r = x (mod G)`` and, of each, the tiles ``k = y (mod Y)`` of ``TILE`` consecutive verify entries
(a run of consecutive positions of one ``req_to_token`` row: coalesced reads, no per-entry search). It
scans the batch once for the total (overflow: then no entry is written) and its first row's verify
offset, in the same pass, and advances the offset by the ``G`` rows in between for each further row it
owns; for the usual ``bs <= G`` it owns one row and the scan is one chunk of ``CHUNK`` rows held in
registers. ``G = min(bs, SMs x plan_row_waves)`` and ``Y = cdiv(capacity, G x TILE)`` (bounded), so a full
plan gives about one tile per program, all in flight at once. Program ``(G, 0)`` writes stage 1's outputs
(write offsets, seeds, counts, the scratch when the plan has one).
"""

from __future__ import annotations

import torch
import triton.language as tl

from kvcanary.extensions import zero_slot_on
from kvcanary.ops.plan import PLAN, PlanLaunch
from kvcanary_backends.triton._jit import (
    INTERPRETER_PROGRAMS,
    TUNING,
    LaunchArgs,
    Launcher,
    PreparedLaunch,
    cdiv,
    kernel,
    num_sms,
    type_key,
)
from kvcanary_backends.triton._plan_common import (
    chunk_rows,
    expected_token,
    mark_zero,
    offsets_stage,
    read_slot,
    sat_add,
    sat_sum,
    window_start,
)


@kernel()
def _plan_kernel(
    rpi: tl.tensor, prefix: tl.tensor, extend: tl.tensor, bs: tl.tensor, swa: tl.tensor,
    r2t: tl.tensor, r2t_rows: tl.tensor, r2t_cols: tl.tensor, lut: tl.tensor, lut_len: tl.tensor,
    pool: tl.tensor, pool_rows: tl.tensor, pool_cols: tl.tensor, valid_lens: tl.tensor, token_offset: tl.tensor,
    capacity: tl.tensor, out_slots: tl.tensor, out_tokens: tl.tensor, out_positions: tl.tensor, out_prev: tl.tensor,
    num_valid_out: tl.tensor, enable_out: tl.tensor, scratch: tl.tensor,
    write_offsets: tl.tensor, write_offsets_len: tl.tensor, seeds_out: tl.tensor, num_reqs_out: tl.tensor,
    row_programs: tl.tensor,
    HAS_LUT: tl.constexpr, HAS_POOL: tl.constexpr, HAS_SCRATCH: tl.constexpr,
    CHUNK: tl.constexpr, TILE: tl.constexpr, MARK_ZERO: tl.constexpr, SAT_LIMBS: tl.constexpr,
    CAP_MASK: tl.constexpr, TOKEN_LAST: tl.constexpr,
) -> None:
    x = tl.program_id(0).to(tl.int64)
    y = tl.program_id(1).to(tl.int64)
    ny = tl.num_programs(1).to(tl.int64)
    g = row_programs.to(tl.int64)
    if x == g:
        if y == 0:
            offsets_stage(rpi, prefix, extend, bs, swa, r2t, r2t_rows, r2t_cols, lut, lut_len, capacity, scratch,
                          write_offsets, write_offsets_len, seeds_out, num_valid_out, enable_out, num_reqs_out,
                          HAS_LUT, HAS_SCRATCH, True, CHUNK)
    else:
        # one pass over the batch: the total (overflow decides whether any entry is written) and the verify
        # offset of this program's first row (the sum over the rows before it)
        total = (bs * 0).to(tl.int64)
        before = (bs * 0).to(tl.int64)
        if SAT_LIMBS:
            # saturated at INT64_MAX over 32-bit limbs: a total that would wrap overflows instead
            for c in range(0, bs, CHUNK):
                rows, _rm, _rp, _pl, vlen = chunk_rows(rpi, prefix, bs, swa, c, CHUNK)
                total = sat_add(total, sat_sum(vlen))
                before = sat_add(before, sat_sum(tl.where(rows < x, vlen, 0)))
        else:
            # one reduction per sum: each length clamped at capacity + 1 (a row longer than the capacity
            # overflows the plan as its exact length would) and the running sums too, so no sum of CHUNK + 1
            # such values passes INT64_MAX (the host checks: limb_sums) and min(total, capacity + 1) decides
            # the overflow exactly as the saturated total does
            over = capacity.to(tl.int64) + 1
            for c in range(0, bs, CHUNK):
                rows, _rm, _rp, _pl, vlen = chunk_rows(rpi, prefix, bs, swa, c, CHUNK)
                short = tl.minimum(vlen, over)
                total = tl.minimum(total + tl.sum(short), over)
                before = tl.minimum(before + tl.sum(tl.where(rows < x, short, 0)), over)
        # when the total is within the capacity every sum above is exact and each entry e = before + j of a
        # row lies below the total, hence the capacity, so the tiles' stores are masked to their row alone (a
        # per-entry test against the capacity costs registers, hence resident programs: docs/tuning.md). The
        # token-pool path has two switches that only change how ptxas allocates its registers, never a result
        # (host: TUNING's plan_pool_* keys): CAP_MASK adds that test back (it cannot fail here) and TOKEN_LAST
        # gathers the tokens after the other three stores (the contract refuses an output that overlaps an
        # input, so no store changes what the tile reads)
        if total <= capacity:
            lanes = tl.arange(0, TILE)
            for r in range(x, bs, g):
                rp = tl.load(rpi + r)
                pl = tl.load(prefix + r)
                vl = 0
                if HAS_POOL:
                    vl = tl.load(valid_lens + r)
                ws = window_start(pl, swa)
                n = tl.where(rp != 0, tl.maximum(pl - ws, 0), 0)
                for k in range(y * TILE, n, ny * TILE):
                    j = k + lanes
                    m = j < n
                    if CAP_MASK:
                        m = m & (before + j < capacity)
                    pos = ws + j
                    slot = read_slot(r2t, r2t_rows, r2t_cols, lut, lut_len, rp, pos, m, HAS_LUT)
                    if MARK_ZERO:
                        slot = mark_zero(r2t, r2t_rows, r2t_cols, rp, pos, m, slot)
                    prev = tl.where(pos > 0, read_slot(r2t, r2t_rows, r2t_cols, lut, lut_len, rp, pos - 1,
                                                       m & (pos > 0), HAS_LUT), -1)
                    e = before + j
                    if TOKEN_LAST:
                        tl.store(out_slots + e, slot, mask=m)
                        tl.store(out_prev + e, prev, mask=m)
                        tl.store(out_positions + e, pos, mask=m)
                        tok = expected_token(pool, pool_rows, pool_cols, vl, rp, pos, token_offset, m, HAS_POOL)
                        tl.store(out_tokens + e, tok, mask=m)
                    else:
                        tok = expected_token(pool, pool_rows, pool_cols, vl, rp, pos, token_offset, m, HAS_POOL)
                        tl.store(out_slots + e, slot, mask=m)
                        tl.store(out_prev + e, prev, mask=m)
                        tl.store(out_positions + e, pos, mask=m)
                        tl.store(out_tokens + e, tok, mask=m)
                # the next owned row's offset: add the rows [r, r + g) (none past the batch)
                for c2 in range(r, tl.minimum(r + g, bs), CHUNK):
                    rows2, _rm2, _rp2, _pl2, vlen2 = chunk_rows(rpi, prefix, bs, swa, c2, CHUNK)
                    before += tl.sum(tl.where(rows2 < r + g, vlen2, 0))


_LAUNCH = Launcher(_plan_kernel)


def plan_grid(device: torch.device, bs: int, capacity: int) -> tuple[int, int]:
    """``(G, Y)`` of the grid ``(G + 1, Y)``: row programs and programs per row, from shapes only."""
    tile = TUNING["plan_tile"]
    cap_rows = INTERPRETER_PROGRAMS if device.type != "cuda" else num_sms(device) * TUNING["plan_row_waves"]
    g = min(bs, cap_rows)
    y = max(1, min(TUNING["plan_max_y"], cdiv(capacity, max(g, 1) * tile)))
    return g, y


I64_MAX = (1 << 63) - 1


def limb_sums(capacity: int, chunk: int) -> bool:
    """Whether the row programs' scan needs the saturated limb sums: only where ``chunk + 1`` lengths clamped at
    ``capacity + 1`` could sum past INT64_MAX (a capacity near ``2**63 / chunk`` entries: no real plan)."""
    return (chunk + 1) * (capacity + 1) > I64_MAX


def _launch_args(call: PlanLaunch) -> LaunchArgs:
    """(grid, variant key, arguments, constexprs, warps) of the launch of ``call``."""
    vp, wp = call.verify_plan_out, call.write_plan_out
    bs = call.req_pool_indices.shape[0]
    capacity = vp.verify_slot_indices.shape[0]
    lut = call.full_to_swa_index_mapping
    pool = call.req_to_verify_expected_tokens
    valid = call.req_to_verify_expected_tokens_valid_lens
    scratch = vp.verify_offsets_scratch
    g, ny = plan_grid(call.req_pool_indices.device, bs, capacity)
    args = (call.req_pool_indices, call.prefix_lens, call.extend_seq_lens, bs, int(call.swa_window_size),
            call.req_to_token, call.req_to_token.shape[0], call.req_to_token.shape[1], lut,
            0 if lut is None else lut.shape[0], pool, 0 if pool is None else pool.shape[0],
            0 if pool is None else pool.shape[1],
            None if pool is None else (call.prefix_lens if valid is None else valid),
            int(call.kv_token_id_vs_position_offset), capacity, vp.verify_slot_indices, vp.verify_expected_tokens,
            vp.verify_expected_positions, vp.verify_prev_slot_indices, vp.verify_num_valid, vp.enable, scratch,
            wp.write_offsets, wp.write_offsets.shape[0], wp.write_seed_slot_indices, wp.write_num_valid_reqs, g)
    has_pool = pool is not None
    return ((g + 1, ny), type_key(args), args,
            (lut is not None, has_pool, scratch is not None, TUNING["plan_chunk"], TUNING["plan_tile"],
             zero_slot_on(call.extensions), limb_sums(capacity, TUNING["plan_chunk"]),
             has_pool and TUNING["plan_pool_cap_mask"] != 0, has_pool and TUNING["plan_pool_token_last"] != 0),
            TUNING["plan_warps"])


def max_registers(call: PlanLaunch) -> int:
    """The register cap of the launch of ``call`` (0: none): ``plan_pool_max_registers`` with the token pool,
    ``plan_max_registers`` without (two specializations, each its own registers)."""
    return TUNING["plan_pool_max_registers" if call.req_to_verify_expected_tokens is not None else
                  "plan_max_registers"]


def prepare(call: PlanLaunch) -> PreparedLaunch | None:
    """The launch of ``call`` with its arguments bound (:meth:`Launcher.prepare`)."""
    return _LAUNCH.prepare(*_launch_args(call), maxnreg=max_registers(call))


@PLAN.kernel("triton", notes="one fused launch; each program derives the offsets it needs", prepare=prepare)
def plan(call: PlanLaunch) -> None:
    """Launch the fused plan kernel (capture-safe: grid from capacities and shapes, no host sync)."""
    _LAUNCH(*_launch_args(call), maxnreg=max_registers(call))

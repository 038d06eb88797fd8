"""plan_entries: stage 2 alone (SGLang's ``launch_plan_entries_kernel``), from stage 1's scratch.

Entries ``e < min(scratch[bs], capacity)`` (none when ``verify_enable == 0``) are written; later ones keep
their values. Entry ``e`` belongs to row ``clamp(upper_bound(scratch[0:bs], e) - 1, 0, bs - 1)``, found with
the same binary search ``torch.searchsorted(..., right=True)`` runs, so even a scratch that is not sorted
maps every entry to the row torch_ref picks. A persistent grid strides over the entries.
"""

from __future__ import annotations

import triton.language as tl

from kvcanary.consts import PLAN_BS_BLOCK_SIZE
from kvcanary.extensions import zero_slot_on
from kvcanary.ops.plan_entries import PLAN_ENTRIES, PlanEntriesLaunch
from kvcanary_backends.triton._jit import (
    TUNING,
    LaunchArgs,
    Launcher,
    PreparedLaunch,
    cdiv,
    kernel,
    nothing,
    persistent_grid,
    type_key,
)
from kvcanary_backends.triton._plan_common import expected_token, mark_zero, read_slot, window_start

_SEARCH_STEPS = PLAN_BS_BLOCK_SIZE.bit_length()  # halvings that empty any range of <= 4096 rows: 13


@kernel()
def _entries_kernel(
    rpi: tl.tensor, prefix: tl.tensor, bs: tl.tensor, swa: tl.tensor,
    r2t: tl.tensor, r2t_rows: tl.tensor, r2t_cols: tl.tensor, lut: tl.tensor, lut_len: tl.tensor,
    pool: tl.tensor, pool_rows: tl.tensor, pool_cols: tl.tensor, valid_lens: tl.tensor, token_offset: tl.tensor,
    scratch: tl.tensor, enable: tl.tensor, capacity: tl.tensor,
    out_slots: tl.tensor, out_tokens: tl.tensor, out_positions: tl.tensor, out_prev: tl.tensor,
    HAS_LUT: tl.constexpr, HAS_POOL: tl.constexpr, STEPS: tl.constexpr, BLOCK: tl.constexpr,
    MARK_ZERO: tl.constexpr,
) -> None:
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    total = tl.load(scratch + bs)
    n = tl.where(tl.load(enable) != 0, tl.minimum(tl.maximum(total, 0), capacity), 0)
    lanes = tl.arange(0, BLOCK).to(tl.int64)
    for start in range(pid.to(tl.int64) * BLOCK, n, nprog.to(tl.int64) * BLOCK):
        e = start + lanes
        m = e < n
        # torch's upper_bound: while lo < hi: mid = lo + (hi - lo) // 2; lo = mid + 1 if not (b[mid] > e) else ...
        lo = tl.zeros((BLOCK,), tl.int64)
        hi = tl.zeros((BLOCK,), tl.int64) + bs
        for _ in tl.static_range(STEPS):
            act = m & (lo < hi)
            mid = lo + ((hi - lo) >> 1)
            above = tl.load(scratch + tl.where(act, mid, 0), mask=act, other=0) > e
            lo = tl.where(act & ~above, mid + 1, lo)
            hi = tl.where(act & above, mid, hi)
        r = tl.minimum(tl.maximum(lo - 1, 0), bs - 1)
        rp = tl.load(rpi + r, mask=m, other=0)
        pl = tl.load(prefix + r, mask=m, other=0)
        first = tl.load(scratch + r, mask=m, other=0)
        pos = window_start(pl, swa) + (e - first)
        slot = read_slot(r2t, r2t_rows, r2t_cols, lut, lut_len, rp, pos, m, HAS_LUT)
        if MARK_ZERO:
            slot = mark_zero(r2t, r2t_rows, r2t_cols, rp, pos, m, slot)
        prev = tl.where(pos > 0, read_slot(r2t, r2t_rows, r2t_cols, lut, lut_len, rp, pos - 1, m & (pos > 0),
                                           HAS_LUT), -1)
        vl = tl.zeros((BLOCK,), tl.int64)
        if HAS_POOL:
            vl = tl.load(valid_lens + r, mask=m, other=0)
        tok = expected_token(pool, pool_rows, pool_cols, vl, rp, pos, token_offset, m, HAS_POOL)
        tl.store(out_slots + e, slot, mask=m)
        tl.store(out_prev + e, prev, mask=m)
        tl.store(out_positions + e, pos, mask=m)
        tl.store(out_tokens + e, tok, mask=m)


_LAUNCH = Launcher(_entries_kernel)


def _launch_args(call: PlanEntriesLaunch) -> LaunchArgs | None:
    """(grid, variant key, arguments, constexprs, warps) of the launch of ``call``; None: nothing to launch."""
    bs = int(call.req_pool_indices.shape[0])
    capacity = int(call.out_verify_slot_indices.shape[0])
    if bs == 0 or capacity == 0:
        return None
    lut = call.full_to_swa_index_mapping
    pool = call.req_to_verify_expected_tokens
    valid = call.req_to_verify_expected_tokens_valid_lens
    block = TUNING["entries_block"]
    grid = (persistent_grid(call.req_pool_indices.device, cdiv(capacity, block), TUNING["entries_waves"]),)
    args = (call.req_pool_indices, call.prefix_lens, bs, int(call.swa_window_size), call.req_to_token,
            call.req_to_token.shape[0], call.req_to_token.shape[1], lut, 0 if lut is None else lut.shape[0], pool,
            0 if pool is None else pool.shape[0], 0 if pool is None else pool.shape[1],
            None if pool is None else (call.prefix_lens if valid is None else valid),
            int(call.kv_token_id_vs_position_offset), call.verify_offsets_scratch, call.verify_enable, capacity,
            call.out_verify_slot_indices, call.out_verify_expected_tokens, call.out_verify_expected_positions,
            call.out_verify_prev_slot_indices)
    return (grid, type_key(args), args, (lut is not None, pool is not None, _SEARCH_STEPS, block,
                                         zero_slot_on(call.extensions)), TUNING["entries_warps"])


def prepare(call: PlanEntriesLaunch) -> PreparedLaunch | None:
    """The launch of ``call`` with its arguments bound (:meth:`Launcher.prepare`)."""
    a = _launch_args(call)
    return nothing if a is None else _LAUNCH.prepare(*a)


@PLAN_ENTRIES.kernel("triton", notes="persistent grid, per-entry binary search", prepare=prepare)
def plan_entries(call: PlanEntriesLaunch) -> None:
    """Launch stage 2 (persistent grid; capture-safe). Nothing runs for an empty batch or plan (shapes)."""
    a = _launch_args(call)
    if a is not None:
        _LAUNCH(*a)

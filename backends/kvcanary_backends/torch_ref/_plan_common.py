"""The plan's two stages, shared by plan, plan_offsets and plan_entries.

Slot reads follow one rule everywhere: ``req_to_token[rp, pos]`` outside the tensor reads INVALID_SLOT; a
value below 0 passes the full→SWA translation unchanged (INVALID_SLOT included); a value at or past the
LUT's length translates to INVALID_SLOT (never clamped to a wrong but valid slot).

Lengths and offsets never wrap around, whatever the (device) prefix and extend lengths hold: a row's window
start is ``prefix - swa_window_size`` only when that is positive (computed without overflow), its verify
length is ``clamp(prefix, 0, swa_window_size)`` (``max(prefix, 0)`` for a FULL group), and the offsets are
exact prefix sums *saturated* at INT64_MAX (2**63 - 1). A saturated total exceeds every real capacity, so
the plan overflows (``enable = 0``) instead of wrapping to a small total that would name entries past the
arrays. Every backend computes the same saturated values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.consts import INVALID_SLOT, REQ_POOL_IDX_PADDING, ZERO_SLOT_MARK
from kvcanary.ops.plan import PlanLaunch
from kvcanary.ops.plan_offsets import PlanOffsetsLaunch


def read_slot(
    req_to_token: torch.Tensor, lut: torch.Tensor | None, rp: torch.Tensor, pos: torch.Tensor
) -> torch.Tensor:
    rows, cols = req_to_token.shape
    ok = (rp >= 0) & (rp < rows) & (pos >= 0) & (pos < cols)
    flat = torch.where(ok, rp * cols + pos, 0)
    raw = torch.where(ok, req_to_token.reshape(-1)[flat].to(torch.int64), INVALID_SLOT)
    if lut is None:
        return raw
    n = lut.shape[0]
    inside = (raw >= 0) & (raw < n)
    looked = lut[torch.where(inside, raw, 0)]
    return torch.where(raw < 0, raw, torch.where(inside, looked, INVALID_SLOT))


INT64_MAX = 2**63 - 1
_LOW32 = 2**32 - 1


def window_start(prefix_lens: torch.Tensor, swa_window_size: int) -> torch.Tensor:
    """``prefix - swa_window_size`` where that is positive (an SWA group), else 0; never wraps (the window is
    in ``[0, INT64_MAX]``, so the difference is only taken where it is positive)."""
    if swa_window_size > 0:
        return torch.where(prefix_lens > swa_window_size, prefix_lens - swa_window_size, 0)
    return torch.zeros_like(prefix_lens)


def _from_limbs(hi: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    """``min(hi * 2**32 + lo, INT64_MAX)`` for exact non-negative limb sums (no intermediate overflows)."""
    hi = hi + (lo >> 32)
    lo = lo & _LOW32
    return torch.where(hi >= 2**31, INT64_MAX, (hi.clamp(max=2**31 - 1) << 32) | lo)


def saturated_offsets(lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exclusive prefix sums of non-negative ``lengths`` and their total, each saturated at INT64_MAX.

    Exact below the saturation point: the sums are taken over 32-bit limbs (``bs <= 4096`` rows of at most
    2**32 each cannot overflow a limb sum), then recombined with saturation.
    """
    lo = lengths & _LOW32
    hi = lengths >> 32
    clo = torch.cumsum(lo, 0)
    chi = torch.cumsum(hi, 0)
    exclusive = _from_limbs(chi - hi, clo - lo)
    total = _from_limbs(hi.sum().reshape(1), lo.sum().reshape(1))
    return exclusive, total


@dataclass
class Offsets:
    verify_exclusive: torch.Tensor  # [bs]
    verify_total: torch.Tensor  # [1]
    write_exclusive: torch.Tensor  # [bs]
    write_total: torch.Tensor  # [1]
    seeds: torch.Tensor  # [bs]
    num_valid: torch.Tensor  # [1] int32
    enable: torch.Tensor  # [1] int32


def offsets_stage(call: PlanLaunch | PlanOffsetsLaunch) -> Offsets:
    """Stage 1 of the plan, from the fields the fused plan and the offsets launch share."""
    req_pool_indices, prefix_lens, extend_seq_lens = call.req_pool_indices, call.prefix_lens, call.extend_seq_lens
    req_to_token, lut = call.req_to_token, call.full_to_swa_index_mapping
    swa_window_size, verify_capacity = call.swa_window_size, call.verify_capacity
    active = req_pool_indices != REQ_POOL_IDX_PADDING
    ws = window_start(prefix_lens, swa_window_size)
    vlen = torch.where(active, (prefix_lens - ws).clamp(min=0), 0)
    wlen = torch.where(active, extend_seq_lens.clamp(min=0), 0)
    vexcl, vtot = saturated_offsets(vlen)
    wexcl, wtot = saturated_offsets(wlen)
    has_seed = active & (prefix_lens > 0) & (wlen > 0)
    seed = read_slot(req_to_token, lut, req_pool_indices, prefix_lens - 1)
    overflow = vtot > verify_capacity
    return Offsets(
        verify_exclusive=vexcl,
        verify_total=vtot,
        write_exclusive=wexcl,
        write_total=wtot,
        seeds=torch.where(has_seed, seed, -1),
        num_valid=torch.where(overflow, verify_capacity, vtot).to(torch.int32),
        enable=torch.where(overflow, 0, 1).to(torch.int32),
    )


def entries_stage(
    *,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    lut: torch.Tensor | None,
    swa_window_size: int,
    offsets: torch.Tensor,  # [bs] exclusive verify offsets
    total: torch.Tensor,  # [1]
    enable: torch.Tensor,  # [1]
    pool: torch.Tensor | None,
    valid_lens: torch.Tensor | None,
    token_offset: int,
    out_slots: torch.Tensor,
    out_tokens: torch.Tensor,
    out_positions: torch.Tensor,
    out_prev: torch.Tensor,
    mark_zero: bool = False,
) -> None:
    """Entries ``e < min(total, capacity)`` (none when ``enable == 0``); later entries keep their values.

    ``mark_zero`` (the ZERO_SLOT_IN_LIVE_RANGE extension): an entry of a non-padding request row whose
    ``req_to_token`` value is 0 and whose (translated) slot is 0 gets the slot ZERO_SLOT_MARK instead, for
    verify to report. A slot the LUT translates to 0 from a non-zero value (an evicted SWA position) stays 0.

    From offsets the plan computed itself every position is exact. Stage 2 alone (``plan_entries``) takes
    stage 1's scratch as given: from a hostile one, ``pos = window_start + (e - offsets[r])`` is computed in
    wrapping int64 arithmetic, identically on every backend, and every read it leads to is bounds-checked.
    """
    cap = out_slots.shape[0]
    bs = req_pool_indices.shape[0]
    if cap == 0 or bs == 0:
        return
    dev = out_slots.device
    e = torch.arange(cap, device=dev)
    live = (e < total) & (enable != 0)
    r = (torch.searchsorted(offsets.contiguous(), e, right=True) - 1).clamp(0, bs - 1)
    rp = req_pool_indices[r]
    pos = window_start(prefix_lens, swa_window_size)[r] + (e - offsets[r])
    slot = read_slot(req_to_token, lut, rp, pos)
    if mark_zero:
        raw = read_slot(req_to_token, None, rp, pos)
        slot = torch.where((raw == 0) & (slot == 0) & (rp != REQ_POOL_IDX_PADDING), ZERO_SLOT_MARK, slot)
    prev = torch.where(pos > 0, read_slot(req_to_token, lut, rp, pos - 1), -1)
    if pool is not None:
        assert valid_lens is not None
        prow, pcol = pool.shape
        q = pos + token_offset
        ok = (q >= 0) & (q < valid_lens[r]) & (q < pcol) & (rp >= 0) & (rp < prow)
        tok = torch.where(ok, pool.reshape(-1)[torch.where(ok, rp * pcol + q, 0)].to(torch.int64), -1)
    else:
        tok = torch.full_like(e, -1)
    out_slots.copy_(torch.where(live, slot, out_slots))
    out_prev.copy_(torch.where(live, prev, out_prev))
    out_positions.copy_(torch.where(live, pos, out_positions))
    out_tokens.copy_(torch.where(live, tok, out_tokens))

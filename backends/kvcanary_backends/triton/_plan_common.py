"""Device functions shared by the three plan operations (torch_ref's ``_plan_common`` rules).

Slot reads: ``req_to_token[rp, pos]`` outside the tensor reads INVALID_SLOT; a value below 0 passes the
full→SWA translation unchanged; a value at or past the LUT's length translates to INVALID_SLOT (never
clamped). Every load is masked to its tensor.

Batch rows are processed in chunks of ``CHUNK`` rows (a constexpr; the number of chunks is a loop bound
read from ``bs``), so a small batch touches one chunk and no batch size recompiles.

Nothing wraps around (torch_ref's ``_plan_common`` rules): the window start is taken only where it is
positive, and offsets and totals are exact prefix sums saturated at INT64_MAX, summed over 32-bit limbs
(:func:`sat_scan`, :func:`sat_sum`) and carried across chunks with a saturating add (:func:`sat_add`).
"""

from __future__ import annotations

import triton.language as tl

from kvcanary_backends.triton._hash import INVALID, ZERO_MARK
from kvcanary_backends.triton._jit import device_fn

I64_MAX = tl.constexpr(2**63 - 1)


@device_fn
def window_start(prefix: tl.tensor, swa: tl.tensor) -> tl.tensor:
    """First verified position: ``prefix - swa`` where that is positive, for an SWA group (swa > 0), else 0
    (never wraps: the difference is used only where it is positive)."""
    return tl.where((swa > 0) & (prefix > swa), prefix - swa, 0)


@device_fn
def sat_add(a: tl.tensor, b: tl.tensor) -> tl.tensor:
    """``min(a + b, INT64_MAX)`` for ``a, b`` in ``[0, INT64_MAX]``, without an intermediate overflow."""
    return a + tl.minimum(b, I64_MAX - a)


@device_fn
def from_limbs(hi: tl.tensor, lo: tl.tensor) -> tl.tensor:
    """``min(hi * 2**32 + lo, INT64_MAX)`` for exact non-negative limb sums (each far below 2**62)."""
    carry = lo >> 32
    hi = hi + carry
    lo = lo - (carry << 32)
    return tl.where(hi > 2147483647, I64_MAX, (tl.minimum(hi, 2147483647) << 32) + lo)


@device_fn
def sat_scan(lens: tl.tensor) -> tuple[tl.tensor, tl.tensor]:
    """Exclusive prefix sums of a chunk of non-negative int64 lengths and their sum, both saturated."""
    hi = lens >> 32
    lo = lens - (hi << 32)
    return from_limbs(tl.cumsum(hi, 0) - hi, tl.cumsum(lo, 0) - lo), from_limbs(tl.sum(hi, 0), tl.sum(lo, 0))


@device_fn
def sat_sum(lens: tl.tensor) -> tl.tensor:
    """The sum of a chunk of non-negative int64 lengths, saturated at INT64_MAX."""
    hi = lens >> 32
    return from_limbs(tl.sum(hi, 0), tl.sum(lens - (hi << 32), 0))


@device_fn
def read_slot(r2t: tl.tensor, rows: tl.tensor, cols: tl.tensor, lut: tl.tensor, lut_len: tl.tensor,
              rp: tl.tensor, pos: tl.tensor, mask: tl.tensor, HAS_LUT: tl.constexpr) -> tl.tensor:
    """``T(req_to_token[rp, pos])`` as int64, with the out-of-range rules above (lanes off ``mask``: any)."""
    # `!= 0`: under the interpreter a vector mask combined with a scalar bool (rp) can carry int64 data,
    # which its loads reject; it is free when compiled.
    ok = (mask & (rp >= 0) & (rp < rows) & (pos >= 0) & (pos < cols)) != 0
    flat = tl.where(ok, rp * cols + pos, 0)
    raw = tl.where(ok, tl.load(r2t + flat, mask=ok, other=0).to(tl.int64), INVALID)
    if HAS_LUT:
        inside = (raw >= 0) & (raw < lut_len)
        looked = tl.load(lut + tl.where(inside, raw, 0), mask=(mask & inside) != 0, other=0)
        raw = tl.where(raw < 0, raw, tl.where(inside, looked, INVALID))
    return raw


@device_fn
def mark_zero(r2t: tl.tensor, rows: tl.tensor, cols: tl.tensor, rp: tl.tensor, pos: tl.tensor, mask: tl.tensor,
              slot: tl.tensor) -> tl.tensor:
    """The ZERO_SLOT_IN_LIVE_RANGE extension: ZERO_MARK where a non-padding row's ``req_to_token`` value is 0
    and its translated slot is 0 (an evicted SWA position, translated to 0 from a non-zero value, stays 0)."""
    raw = read_slot(r2t, rows, cols, r2t, rows, rp, pos, mask, False)
    return tl.where((raw == 0) & (slot == 0) & (rp != 0), ZERO_MARK, slot)


@device_fn
def expected_token(pool: tl.tensor, pool_rows: tl.tensor, pool_cols: tl.tensor, valid_len: tl.tensor,
                   rp: tl.tensor, pos: tl.tensor, token_offset: tl.tensor, mask: tl.tensor,
                   HAS_POOL: tl.constexpr) -> tl.tensor:
    """``pool[rp, pos + offset]`` (int32 → int64) where that lies inside the pool and the row's valid length,
    else -1 ("no token check")."""
    if HAS_POOL:
        q = pos + token_offset
        ok = (mask & (q >= 0) & (q < valid_len) & (q < pool_cols) & (rp >= 0) & (rp < pool_rows)) != 0
        flat = tl.where(ok, rp * pool_cols + q, 0)
        tok = tl.where(ok, tl.load(pool + flat, mask=ok, other=0).to(tl.int64), -1)
    else:
        tok = (pos * 0 - 1).to(tl.int64)
    return tok


@device_fn
def chunk_rows(rpi: tl.tensor, prefix: tl.tensor, bs: tl.tensor, swa: tl.tensor, first: tl.tensor,
               CHUNK: tl.constexpr) -> tuple[tl.tensor, tl.tensor, tl.tensor, tl.tensor, tl.tensor]:
    """Batch rows ``[first, first + CHUNK)``: index, in-batch mask, pool row, prefix length, verify length."""
    rows = first + tl.arange(0, CHUNK)
    rm = rows < bs
    rp = tl.load(rpi + rows, mask=rm, other=0)
    pl = tl.load(prefix + rows, mask=rm, other=0)
    active = rm & (rp != 0)
    vlen = tl.where(active, tl.maximum(pl - window_start(pl, swa), 0), 0)
    return rows, rm, rp, pl, vlen


@device_fn
def offsets_stage(rpi: tl.tensor, prefix: tl.tensor, extend: tl.tensor, bs: tl.tensor, swa: tl.tensor,
                  r2t: tl.tensor, r2t_rows: tl.tensor, r2t_cols: tl.tensor, lut: tl.tensor, lut_len: tl.tensor,
                  capacity: tl.tensor, scratch: tl.tensor, write_offsets: tl.tensor, write_offsets_len: tl.tensor,
                  seeds_out: tl.tensor, num_valid_out: tl.tensor, enable_out: tl.tensor, num_reqs_out: tl.tensor,
                  HAS_LUT: tl.constexpr, HAS_SCRATCH: tl.constexpr, ZERO_TAIL: tl.constexpr,
                  CHUNK: tl.constexpr) -> None:
    """Stage 1: verify offsets (scratch), write offsets, seeds, num_valid, enable, num_valid_reqs.

    Rows go in chunks of ``CHUNK`` with running (saturated) totals (a loop over ``cdiv(bs, CHUNK)`` chunks, so
    a small batch costs one chunk and no batch size recompiles). ``ZERO_TAIL`` also zeroes ``write_offsets`` past
    index ``bs`` (the fused plan does, plan_offsets does not). Every element is stored by one thread.
    """
    vcarry = (bs * 0).to(tl.int64)
    wcarry = (bs * 0).to(tl.int64)
    for c in range(0, bs, CHUNK):
        rows, rm, rp, pl, vlen = chunk_rows(rpi, prefix, bs, swa, c, CHUNK)
        active = rm & (rp != 0)
        wlen = tl.where(active, tl.maximum(tl.load(extend + rows, mask=rm, other=0), 0), 0)
        has_seed = active & (pl > 0) & (wlen > 0)
        seed = read_slot(r2t, r2t_rows, r2t_cols, lut, lut_len, rp, pl - 1, has_seed, HAS_LUT)
        tl.store(seeds_out + rows, tl.where(has_seed, seed, -1), mask=rm)
        wex, wsum = sat_scan(wlen)
        tl.store(write_offsets + rows, sat_add(wcarry, wex), mask=rm)
        if HAS_SCRATCH:
            vex, vsum = sat_scan(vlen)
            tl.store(scratch + rows, sat_add(vcarry, vex), mask=rm)
            vcarry = sat_add(vcarry, vsum)
        else:
            vcarry = sat_add(vcarry, sat_sum(vlen))
        wcarry = sat_add(wcarry, wsum)
    tl.store(write_offsets + bs, wcarry)
    if HAS_SCRATCH:
        tl.store(scratch + bs, vcarry)
    if ZERO_TAIL:
        lanes = tl.arange(0, CHUNK)
        for c in range(bs + 1, write_offsets_len, CHUNK):
            idx = c + lanes
            tl.store(write_offsets + idx, tl.zeros((CHUNK,), tl.int64), mask=idx < write_offsets_len)
    overflow = vcarry > capacity
    tl.store(num_valid_out, tl.where(overflow, capacity, vcarry).to(tl.int32))
    tl.store(enable_out, tl.where(overflow, 0, 1).to(tl.int32))
    tl.store(num_reqs_out, bs.to(tl.int32))

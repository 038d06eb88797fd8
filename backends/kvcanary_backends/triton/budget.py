"""verify_budget: a verification budget's filter of a verify plan in one launch (semantics: torch_ref/budget.py).

One program per request. Program ``b`` sums the kept entries of the requests before it (its offset in the
budget's plan; ``kept = count - max(count - newest - stride, 0)`` from the offsets alone), reads its row's
cursor (a token position) and its first entry's position, copies its kept entries (three runs of the full plan:
the window's part wrapped to index 0, the rest of the window, the newest entries) to their places below the
output's capacity, and moves its cursor (by ``advance * enable * stride``) unless it has no entries (padding
rows name row 0, where a real request's cursor may live: no two programs write one cursor). The program whose
request holds the full plan's last entry (``num_valid - 1``) writes the count (program 0 when the plan is
empty, the last program when ``num_valid`` lies past the batch), program 0 the enable and, given the counter
(``COUNT``), adds ``1 - enable`` to ``skipped_verifies``. Work: the batch
squared (the offsets' sums) plus the kept entries, never the full plan; grid ``(bs,)`` from shapes; no host
read, no allocation: capturable.
"""

from __future__ import annotations

import triton.language as tl

from kvcanary.ops.budget import VERIFY_BUDGET, VerifyBudgetLaunch, empty_batch
from kvcanary_backends.triton._jit import TUNING, LaunchArgs, Launcher, PreparedLaunch, kernel, type_key


@kernel()
def _budget_kernel(
    scratch: tl.tensor, slots: tl.tensor, tokens: tl.tensor, positions: tl.tensor, prev: tl.tensor,
    num_valid: tl.tensor, enable: tl.tensor, rpi: tl.tensor, cursor: tl.tensor, advance: tl.tensor,
    out_slots: tl.tensor, out_tokens: tl.tensor, out_positions: tl.tensor, out_prev: tl.tensor,
    out_num_valid: tl.tensor, out_enable: tl.tensor, skipped: tl.tensor,
    bs: tl.tensor, cap_in: tl.tensor, cap_out: tl.tensor, num_rows: tl.tensor, newest: tl.tensor,
    stride: tl.tensor,
    BLOCK: tl.constexpr, ROW_BLOCK: tl.constexpr, COUNT: tl.constexpr,
) -> None:
    b = tl.program_id(0).to(tl.int64)
    # the kept entries of the requests before this one: where this one's start in the budget's plan
    rl = tl.arange(0, ROW_BLOCK).to(tl.int64)
    before = tl.zeros((ROW_BLOCK,), tl.int64)
    for c0 in range(0, b, ROW_BLOCK):
        r = c0 + rl
        m = r < b
        cnt = tl.maximum(tl.load(scratch + r + 1, mask=m, other=0) - tl.load(scratch + r, mask=m, other=0), 0)
        gap_r = tl.maximum(tl.maximum(cnt - newest, 0) - stride, 0)
        before += tl.where(m, tl.minimum(cnt - gap_r, cap_out), 0)  # past cap_out: no entry lands, no overflow
    koff = tl.sum(before, 0)
    start = tl.load(scratch + b)
    end = tl.load(scratch + b + 1)
    count = tl.maximum(end - start, 0)  # a request holds no fewer than no entries
    older = tl.maximum(count - newest, 0)
    gap = tl.maximum(older - stride, 0)
    take = older - gap
    kept = count - gap
    row = tl.minimum(tl.maximum(tl.load(rpi + b), 0), num_rows - 1)
    cur = tl.load(cursor + row)
    modulus = tl.maximum(older, 1)
    n = tl.minimum(tl.load(num_valid).to(tl.int64), cap_in)  # a count past the plan names nothing beyond it
    # the cursor is a token position, anchored at the first entry's (0 outside the plan's count)
    has_base = (start >= 0) & (start < n)
    base = tl.load(positions + tl.where(has_base, start, 0), mask=has_base, other=0)
    first = (cur - base) % modulus  # wraps in int64; the remainder may take the dividend's sign
    first = tl.where(first < 0, first + modulus, first)  # torch.remainder: the divisor's sign
    wrap = tl.maximum(first - gap, 0)
    lanes = tl.arange(0, BLOCK).to(tl.int64)
    for k0 in range(0, tl.minimum(kept, cap_out - koff), BLOCK):  # the entries that land below cap_out
        kk = k0 + lanes
        j = tl.where(kk < wrap, kk, tl.where(kk < take, first + kk - wrap, older + kk - take))
        src = start + j
        dest = koff + kk
        ok = (kk < kept) & (dest >= 0) & (dest < cap_out) & (src < n) & (src >= 0) & (src < cap_in)
        s = tl.where(ok, src, 0)
        d = tl.where(ok, dest, 0)
        tl.store(out_slots + d, tl.load(slots + s, mask=ok, other=0), mask=ok)
        tl.store(out_tokens + d, tl.load(tokens + s, mask=ok, other=0), mask=ok)
        tl.store(out_positions + d, tl.load(positions + s, mask=ok, other=0), mask=ok)
        tl.store(out_prev + d, tl.load(prev + s, mask=ok, other=0), mask=ok)
    # the count: written by the request that holds the full plan's last entry (n - 1); by program 0 when n - 1
    # comes before every entry (an empty plan), by the last program when it lies past the batch
    last = n - 1
    if (b == 0) & (last < start):
        tl.store(out_num_valid, (n * 0).to(tl.int32))
    elif ((start <= last) & (last < end)) | ((b == bs - 1) & (last >= end)):
        lim = tl.minimum(n - start, count)  # this request's entries below n
        below = (tl.minimum(wrap, lim) + tl.maximum(tl.minimum(lim, first + take - wrap) - first, 0)
                 + tl.maximum(lim - older, 0))
        tl.store(out_num_valid, tl.minimum(koff + tl.minimum(tl.maximum(below, 0), cap_out), cap_out).to(tl.int32))
    if b == 0:
        en = tl.load(enable)
        tl.store(out_enable, en)
        if COUNT:  # the full plan's overflow: one count per launch whose plan overflowed
            tl.store(skipped, tl.load(skipped) + 1 - en.to(tl.int64))
    if count > 0:  # a request of no entries (padding, a first chunk) leaves its row's cursor
        step = (tl.load(advance) * tl.load(enable).to(tl.int64) * stride) % modulus  # an overflowed plan: no move
        step = tl.where(step < 0, step + modulus, step)
        room = modulus - step  # first + step wraps past the older entries when first >= room (no overflow)
        tl.store(cursor + row, base + tl.where(first >= room, first - room, first + step))


_LAUNCH = Launcher(_budget_kernel)


def _launch_args(call: VerifyBudgetLaunch) -> LaunchArgs | None:
    """(grid, variant key, arguments, constexprs, warps) of the launch of ``call``; None: an empty batch."""
    bs = int(call.req_pool_indices.shape[0])
    if bs == 0:
        return None
    args = (call.verify_offsets_scratch, call.verify_slot_indices, call.verify_expected_tokens,
            call.verify_expected_positions, call.verify_prev_slot_indices, call.verify_num_valid, call.verify_enable,
            call.req_pool_indices, call.cursor, call.advance, call.out_verify_slot_indices,
            call.out_verify_expected_tokens, call.out_verify_expected_positions, call.out_verify_prev_slot_indices,
            call.out_verify_num_valid, call.out_verify_enable, call.skipped_verifies, bs,
            int(call.verify_slot_indices.shape[0]), int(call.out_verify_slot_indices.shape[0]),
            int(call.cursor.shape[0]), call.newest_per_request, call.stride)
    consts = (TUNING["budget_block"], TUNING["budget_row_block"], call.skipped_verifies is not None)
    return (bs,), type_key(args), args, consts, TUNING["budget_warps"]


def _empty(call: VerifyBudgetLaunch) -> None:
    """An empty batch: no entry, no cursor moves (two device copies and the overflow count, no program)."""
    empty_batch(out_verify_num_valid=call.out_verify_num_valid, out_verify_enable=call.out_verify_enable,
                verify_enable=call.verify_enable, skipped_verifies=call.skipped_verifies)


def prepare(call: VerifyBudgetLaunch) -> PreparedLaunch | None:
    """The launch of ``call`` with its arguments bound (:meth:`Launcher.prepare`)."""
    a = _launch_args(call)
    if a is None:
        def empty() -> None:
            _empty(call)
        return empty
    return _LAUNCH.prepare(*a)


@VERIFY_BUDGET.kernel("triton", notes="one program per request; work: the batch squared plus the kept entries",
                      prepare=prepare)
def verify_budget(call: VerifyBudgetLaunch) -> None:
    """Launch the filter (capture-safe: the grid is the batch's size)."""
    a = _launch_args(call)
    if a is None:
        _empty(call)
        return
    _LAUNCH(*a)

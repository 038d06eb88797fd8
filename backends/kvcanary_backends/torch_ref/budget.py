"""verify_budget: a verification budget's filter of a verify plan in torch ops (the reference; any device).

Per request ``b``: ``count`` entries from ``start = scratch[b]``, ``Mz = max(count - newest, 0)`` older ones,
``gap = max(Mz - stride, 0)`` of them left out, ``take = Mz - gap`` kept, ``kept = count - gap`` in all. The
cursor is a token position: ``base``, the position of the request's first entry (``verify_expected_positions
[start]``; 0 when that entry lies outside the plan's count: a first chunk, an overflow), anchors it, so a
sliding window that drops its oldest entries leaves the cursor on the same token. The window starts at ``first
= (cursor - base) mod max(Mz, 1)`` (the difference wraps in int64, the remainder is the divisor's sign);
``wrap = max(first - gap, 0)`` of it runs past the last older entry and continues at index 0. So its kept
entries, in plan order, are three runs, each a shifted copy of the full plan: older ``[0, wrap)``, older
``[first, first + take - wrap)``, newest ``[Mz, count)``. Each budget index finds its run by a binary search
over the runs' starts (``koff``: the kept entries of the requests before, plus the run's offset), so the work
is proportional to the batch and the budget, not the full plan. Full attention's first position is 0: there
the cursor is an index into the older entries.

The cursor of a request's row then becomes ``base + (first + s) mod max(Mz, 1)``, with ``s = advance *
verify_enable * stride`` (an overflowed plan moves no window: its verifies are off), the sum taken without
overflow; a request of no entries (a padding row, a first chunk) leaves it, so padding rows that name a real
request's row never touch that request's cursor.

The count is of the kept entries whose full index is below the full plan's ``num_valid`` (all of them, unless
the plan overflowed), at most the output's capacity. A ``skipped_verifies`` counter, when given, gains
``1 - verify_enable`` (an empty batch included).
"""

from __future__ import annotations

import torch

from kvcanary.ops.budget import VERIFY_BUDGET, VerifyBudgetLaunch, empty_batch


@VERIFY_BUDGET.kernel("torch_ref")
def verify_budget(call: VerifyBudgetLaunch) -> None:
    bs = int(call.req_pool_indices.shape[0])
    if bs == 0:  # an empty forward: nothing to verify, no cursor moves
        empty_batch(out_verify_num_valid=call.out_verify_num_valid, out_verify_enable=call.out_verify_enable,
                    verify_enable=call.verify_enable, skipped_verifies=call.skipped_verifies)
        return
    scratch, cursor, newest, stride = call.verify_offsets_scratch, call.cursor, call.newest_per_request, call.stride
    dev = scratch.device
    count = torch.diff(scratch[: bs + 1]).clamp_min_(0)  # a request holds no fewer than no entries
    older = (count - newest).clamp_min_(0)
    gap = (older - stride).clamp_min_(0)
    take = older - gap
    kept = count - gap
    koff = torch.cumsum(kept, 0).sub_(kept)
    rows = call.req_pool_indices.clamp(0, cursor.numel() - 1)
    cur = cursor[rows]
    modulus = older.clamp_min(1)
    cap_in = call.verify_slot_indices.shape[0]
    n = call.verify_num_valid.clamp(max=cap_in)  # nothing past the plan
    starts = scratch[:bs]
    base = torch.where((starts >= 0) & (starts < n), call.verify_expected_positions[starts.clamp(0, cap_in - 1)], 0)
    first = torch.remainder(cur - base, modulus)
    wrap = (first - gap).clamp_min_(0)
    zero = torch.zeros(bs, dtype=torch.int64, device=dev)
    breaks = torch.stack((zero, wrap, take), 1).add_(koff[:, None]).view(-1)[1:]
    shift = torch.stack((zero, first - wrap, gap), 1).add_((scratch[:bs] - koff)[:, None]).view(-1)
    k = torch.arange(call.out_verify_slot_indices.shape[0], dtype=torch.int64, device=dev)
    src = shift[torch.searchsorted(breaks, k, right=True)].add_(k)
    inside = (src < n) & (k < koff[-1] + kept[-1])
    torch.sum(inside, 0, keepdim=True, dtype=torch.int32, out=call.out_verify_num_valid)
    src.clamp_(0, call.verify_slot_indices.shape[0] - 1)
    pairs = ((call.verify_slot_indices, call.out_verify_slot_indices),
             (call.verify_expected_tokens, call.out_verify_expected_tokens),
             (call.verify_expected_positions, call.out_verify_expected_positions),
             (call.verify_prev_slot_indices, call.out_verify_prev_slot_indices))
    for values, out in pairs:
        torch.index_select(values, 0, src, out=out)
    call.out_verify_enable.copy_(call.verify_enable)
    _count_skipped(call)
    # a request of no entries (a padding row, a first chunk) leaves its row's cursor: added as a delta, so that
    # padding rows naming a real request's row (row 0) never undo that request's move
    step = torch.remainder(call.advance * call.verify_enable * stride, modulus)
    room = modulus - step  # first + step wraps past the older entries when first >= room (no overflow)
    nxt = torch.where(first >= room, first - room, first + step)
    moved = (base + nxt).sub_(cur).mul_(count > 0)
    cursor.index_add_(0, rows, moved)


def _count_skipped(call: VerifyBudgetLaunch) -> None:
    """The overflow count: ``skipped_verifies += 1 - verify_enable`` (nothing without the counter)."""
    if call.skipped_verifies is not None:
        call.skipped_verifies.add_(1).sub_(call.verify_enable)

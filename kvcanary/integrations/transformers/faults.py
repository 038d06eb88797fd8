"""Faults injected into transformers' real engine state (for the tests and ``kvcanary demo --engine
transformers``; the integration never imports this module).

Each fault is a step hook that, once its step comes, corrupts what the engine itself uses: the bytes of
its cache tensor, its block allocator, a request's block table, the position ids of the step. None of
them touches a canary buffer; the canary has to notice the consequences on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kvcanary.integrations.transformers.fault_kinds import DESCRIPTIONS, NEEDS_SLIDING_WINDOW, TfFault
from kvcanary.integrations.transformers.layout import hand_out_next
from kvcanary.integrations.transformers.pool import ScheduledRequest
from kvcanary.integrations.transformers.session import StepView

__all__ = ["DESCRIPTIONS", "NEEDS_SLIDING_WINDOW", "FaultHook", "TfFault"]


@dataclass
class FaultHook:
    """Fires ``fault`` at the first step ``>= start_step`` where its preconditions hold, once."""

    fault: TfFault
    start_step: int = 2
    fired_step: int | None = None
    detail: dict[str, object] = field(default_factory=dict)

    def __call__(self, view: StepView) -> None:
        if self.fired_step is not None or view.step < self.start_step:
            return
        if _FIRE[self.fault](self, view):
            self.fired_step = view.step


def _slot_of(view: StepView, rid: str, position: int) -> int:
    """Physical index of token ``position`` of ``rid`` in the engine's block table as it is now."""
    blocks = view.layout.block_table[rid]
    return view.layout.slot(blocks[position // view.layout.page], position % view.layout.page)


def _complete_blocks(view: StepView, r: ScheduledRequest) -> list[int]:
    blocks = view.layout.block_table.get(r.request_id, [])
    return list(blocks[: r.past_length // view.layout.page])


def _flip(hook: FaultHook, view: StepView) -> bool:
    for r in view.requests:
        if r.past_length > 1:
            slot = _slot_of(view, r.request_id, 1)  # token 1: inside the prefix the step verifies
            row = view.layout.k_rows[slot].reshape(-1).view(torch.uint8)
            row[0] ^= 0x01
            hook.detail = {"request": r.request_id, "slot": slot}
            return True
    return False


def _hand_twice(hook: FaultHook, view: StepView) -> bool:
    """Fires when another decoding request needs a fresh block at the next step and ``r`` does not, so the
    block goes to a second request (handed back to its own holder, it would be one request's bug only)."""
    page = view.layout.page
    grows = [r for r in view.requests if r.query_length == 1 and (r.past_length + 1) % page == 0]
    for r in view.requests:
        blocks = _complete_blocks(view, r)
        shared = view.rows.shared_blocks()
        own = [b for b in blocks if b not in shared and b not in view.layout.cached_blocks()]
        if own and r.query_length == 1 and r not in grows and grows:
            hand_out_next(view.layout, own[-1])
            hook.detail = {"request": r.request_id, "block": own[-1],
                           "slots": [view.layout.slot(own[-1], o) for o in range(view.layout.page)]}
            return True
    return False


def _redirect(hook: FaultHook, view: StepView) -> bool:
    table = view.layout.block_table
    for c in view.requests:
        cb = _complete_blocks(view, c)
        if len(cb) < 2 or c.query_length != 1:
            continue
        for a in view.requests:
            ab = table.get(a.request_id, [])
            if a.request_id != c.request_id and len(ab) > 1 and ab[1] not in cb and cb[1] not in ab:
                table[c.request_id][1] = ab[1]
                hook.detail = {"request": c.request_id, "victim": a.request_id, "block": ab[1],
                               "slot": view.layout.slot(ab[1], 0)}
                return True
    return False


def _shift(hook: FaultHook, view: StepView) -> bool:
    start = 0
    for r in view.requests:
        if r.query_length == 1 and r.past_length > 0:
            pos = view.batch_data["position_ids"]
            pos[0, start] += 1
            slot = _slot_of(view, r.request_id, r.past_length)
            hook.detail = {"request": r.request_id, "token_index": start, "slot": slot}
            return True
        start += r.query_length
    return False


def _stale_swa(hook: FaultHook, view: StepView) -> bool:
    sw = view.layout.sliding
    if sw is None:
        return False
    table = sw.block_table
    for c in view.requests:
        if c.query_length != 1 or c.past_length < 2 * sw.window:  # the ring has moved past any shared prompt
            continue
        for a in view.requests:
            theirs = table.get(a.request_id)
            if a.request_id != c.request_id and theirs and theirs[0] != table[c.request_id][0]:
                block = theirs[0]
                table[c.request_id][0] = block
                hook.detail = {"request": c.request_id, "victim": a.request_id, "block": block,
                               "slots": [block * sw.stride + o for o in range(sw.page)]}
                return True
    return False


_FIRE = {
    TfFault.KV_FLIP_USED: _flip,
    TfFault.BLOCK_HANDED_TWICE: _hand_twice,
    TfFault.BLOCK_TABLE_REDIRECT: _redirect,
    TfFault.POSITION_OFF_BY_ONE: _shift,
    TfFault.STALE_SWA_BLOCK: _stale_swa,
}

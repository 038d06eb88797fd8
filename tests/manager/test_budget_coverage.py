"""The budget's coverage promises (docs/budget.md) on workloads the period tests do not make: a sliding window
that drops entries as the cursor moves, and a layer rotation whose rounds a request is not in every forward of."""

from __future__ import annotations

import pytest
import torch

from kvcanary.launch.plan import launch_canary_plan_kernels
from kvcanary.manager import VerifyBudget
from kvcanary.manager.budget import BudgetFilter
from kvcanary.manager.rotation import rotation_sets
from kvcanary.plans import VerifyPlan, WritePlan
from tests.manager.test_rotation import LayeredWorld, layered_world
from tests.manager.world import Req


def _t(x: list[int]) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.int64)


@pytest.mark.parametrize(("window", "max_entries", "want_period"), [(37, 8, 8), (40, 8, 9), (64, 10, 10)])
def test_a_sliding_window_request_has_every_older_entry_verified_within_the_period(
        window: int, max_entries: int, want_period: int) -> None:
    """One request decoding (E = 1) past an SWA window (37: 35 older entries, stride 6). The docs promise each
    is verified within ``ceil(35 / (6 - 1)) + 1 = 8`` steps. The window's start moves E entries a step; a cursor
    that counted plan indices would jump ``stride + E`` positions, and with ``M % (stride + E) == 0`` skip the
    same positions on every pass (entries leaving the window never verified): the cursor is a token position."""
    newest, steps, prefill = 2, 60, 80
    budget = VerifyBudget(max_entries=max_entries, newest_per_request=newest)
    length = prefill + steps + 1
    r2t = (torch.arange(length, dtype=torch.int32) + 1).reshape(1, length).repeat(2, 1)  # row 0: padding
    lut = torch.arange(length + 2, dtype=torch.int64)  # full -> SWA: identity
    vp = VerifyPlan.allocate(verify_capacity=length, device="cpu")
    wp = WritePlan.allocate(write_req_capacity=1, device="cpu")
    flt = BudgetFilter(budget, num_rows=2, device=torch.device("cpu"))
    period = budget.period(batch_size=1, max_verify_len=window, slide=1)
    assert period == want_period
    unverified: dict[int, int] = {}  # slot -> consecutive steps it was live and not verified
    worst = 0
    for step in range(steps):
        launch_canary_plan_kernels(
            verify_plan_out=vp, write_plan_out=wp, req_pool_indices=_t([1]), prefix_lens=_t([prefill + step]),
            extend_seq_lens=_t([1]), req_to_token=r2t, swa_window_size=window, full_to_swa_index_mapping=lut,
            verify_capacity=length, req_to_verify_expected_tokens=None,
            req_to_verify_expected_tokens_valid_lens=None, kv_token_id_vs_position_offset=0, backend="torch_ref")
        live = vp.verify_slot_indices[: int(vp.verify_num_valid[0])].tolist()
        assert len(live) == window
        kept = flt.apply(vp, batch_size=1, req_pool_indices=_t([1]))
        got = set(kept.verify_slot_indices[: int(kept.verify_num_valid[0])].tolist())
        unverified = {s: 0 if s in got else unverified.get(s, 0) + 1 for s in live}
        worst = max(worst, *unverified.values())
    assert worst < period, f"an older entry went {worst} steps unverified; the period is {period}"


def _flip_k0(w: LayeredWorld, slot: int) -> None:
    """Flip a bit of layer 0's K (read by every TAIL verify, whichever rotation set) in ``slot``."""
    w.k[slot].view(torch.uint8).reshape(-1)[0] ^= 0x10


def _forwards_until_a_flip_is_reported(budget: VerifyBudget, *, together: bool, steps: int) -> int | None:
    """Two rotation sets; request A (12 tokens) and B (5), prefilled, then ``steps`` decode rounds: both in one
    forward (``together``) or A's forward then B's (an engine alternating them). Layer 0's K of A's ninth slot,
    outside A's first window, is flipped after the prefill; returns the round that first reports it (or None)."""
    w = layered_world(2, 2, budget=budget)
    a = Req(1, list(range(100, 140)), list(range(1, 13)))
    b = Req(2, list(range(200, 240)), list(range(32, 37)))
    for fwd in ([[(a, 0, 12), (b, 0, 5)]] if together else [[(a, 0, 12)], [(b, 0, 5)]]):
        w.forward(fwd)
        w.step()
    _flip_k0(w, a.slots[8])
    for n in range(steps):
        a.slots.append(13 + n)
        b.slots.append(37 + n)
        decode_a, decode_b = (a, 12 + n, 1), (b, 5 + n, 1)
        for fwd in ([[decode_a, decode_b]] if together else [[decode_a], [decode_b]]):
            w.forward(fwd)
            w.step()
        if any(slot == a.slots[8] for _, slot, _ in w.events()):
            return n + 1
    return None


def test_with_rotation_a_request_in_every_forward_of_its_rounds_is_covered_within_g_periods() -> None:
    """Two rotation sets and a budget of stride 6 at two requests; A and B decode in every forward. A flip of
    layer 0's K in A's ninth slot (outside A's first window) is reported within ``G`` periods."""
    budget = VerifyBudget(max_entries=16, newest_per_request=2)
    steps = 18
    bound = rotation_sets(4, 2) * budget.period(batch_size=2, max_verify_len=12 + steps)
    assert bound == 12
    caught = _forwards_until_a_flip_is_reported(budget, together=True, steps=steps)
    assert caught is not None and caught <= bound, (caught, bound)


def test_with_rotation_a_request_in_every_other_forward_still_gets_its_window_moved() -> None:
    """Two rotation sets and a budget of stride 6; request A decodes in every other forward (an engine that
    alternates A's decode with B's, as chunked prefill beside decode does). When the cursors moved only in a
    round's last forward (a global counter), A was never in one, so its window stayed at its first 6 older
    entries and a flip of layer 0's K (read by every TAIL verify) in A's ninth slot was never reported. A row's
    cursor now moves in every ``G``-th forward of its own: the flip is reported within G periods of A's."""
    budget = VerifyBudget(max_entries=8, newest_per_request=2)
    steps = 18
    bound = rotation_sets(4, 2) * budget.period(batch_size=1, max_verify_len=12 + steps)
    assert bound == 12
    caught = _forwards_until_a_flip_is_reported(budget, together=False, steps=steps)
    assert caught is not None and caught <= bound, (caught, bound)

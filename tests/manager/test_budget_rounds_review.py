"""rI's review of the budget's per-row rounds (layer rotation, session 12): rows outside the cursor table and
forwards whose plan overflowed, with rounds as without."""

from __future__ import annotations

import torch

from kvcanary.manager import VerifyBudget
from kvcanary.manager.budget import BudgetFilter
from kvcanary.plans import VerifyPlan

CPU = torch.device("cpu")


def _plan(counts: list[int], *, enable: int = 1) -> VerifyPlan:
    """A full plan of requests of ``counts`` entries (positions 0.. per request: full attention)."""
    full = VerifyPlan.allocate(verify_capacity=64, device="cpu")
    off = [0]
    for c in counts:
        off.append(off[-1] + c)
    assert full.verify_offsets_scratch is not None
    full.verify_offsets_scratch[: len(off)] = torch.tensor(off)
    full.verify_slot_indices[: off[-1]] = torch.arange(100, 100 + off[-1])
    full.verify_expected_positions[: off[-1]] = torch.cat([torch.arange(c) for c in counts])
    full.verify_num_valid[0] = off[-1] if enable else 0
    full.enable[0] = enable
    return full


def _kept(plan: VerifyPlan) -> list[int]:
    return plan.verify_slot_indices[: int(plan.verify_num_valid[0])].tolist()


def test_with_rounds_a_row_past_the_cursor_table_is_clamped_as_without() -> None:
    """The launch clamps a request row outside ``[0, num_rows)`` (bad device data: no out-of-bounds access,
    tests/backends/torch_ref/test_bad_indices.py; test_budget.py passes rows past the end). With layer rotation
    (``rounds`` > 1) ``BudgetFilter._hold`` and the take-back index ``seen`` and ``cursor`` with the raw rows:
    an IndexError on the CPU, a device-side assert (a dead CUDA context) on a GPU."""
    budget = VerifyBudget(max_entries=8, newest_per_request=1)
    full = _plan([10, 10])
    for rows in ([1, 7], [1, -1]):
        free = BudgetFilter(budget, num_rows=4, device=CPU, max_batch=4)
        held = BudgetFilter(budget, num_rows=4, device=CPU, max_batch=4)
        want = _kept(free.apply(full, batch_size=2, req_pool_indices=torch.tensor(rows)))
        got = _kept(held.apply(full, batch_size=2, req_pool_indices=torch.tensor(rows), rounds=2))
        assert got == want, rows


def test_with_rounds_an_overflowed_forward_does_not_use_up_a_windows_turn() -> None:
    """docs/budget.md: a forward whose full plan overflowed verifies nothing and moves no cursor, "its windows
    come again at the next forward (the period counts the forwards that verify)"; with rotation each window
    stays for ``G`` of its request's forwards, one per set when they are consecutive. ``_hold`` counts the
    overflowed forward in ``seen`` all the same: with G = 2, [overflow, verify] moves the window after one
    verifying forward, so it is read against one set only (the rotation's counter also moves on an overflowed
    forward, rotation.py tail). Want: the window is kept in G forwards that verify before it moves."""
    budget = VerifyBudget(max_entries=4, newest_per_request=1)  # one request: stride 3 of 11 older entries
    flt = BudgetFilter(budget, num_rows=4, device=CPU, max_batch=4)
    rows = torch.tensor([1])
    flt.apply(_plan([12], enable=0), batch_size=1, req_pool_indices=rows, rounds=2)  # overflowed: verifies none
    first = _kept(flt.apply(_plan([12]), batch_size=1, req_pool_indices=rows, rounds=2))
    second = _kept(flt.apply(_plan([12]), batch_size=1, req_pool_indices=rows, rounds=2))
    assert first == second, "the window moved after one verifying forward of its G = 2"

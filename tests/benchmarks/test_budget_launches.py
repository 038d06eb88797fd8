"""budget_launches counts a decode forward's launches on the CPU: the budget's filter is one launch more than
full verification at HEAD and, since it counts the plan's overflow too, two fewer at TAIL (no overflow count of
its own); its work outside kernels is no larger than full verification's."""

from __future__ import annotations

import pytest
import torch

from benchmarks import budget_launches as bl
from kvcanary.manager import VerifyBudget


def test_the_budget_adds_one_launch_at_head_saves_two_at_tail_and_no_work_outside_kernels() -> None:
    bs, ctx = 8, 48
    counts: dict[str, dict[str, bl.Counts]] = {}
    for name, vb in (("full", None), ("budget", VerifyBudget(max_entries=bs * (ctx - 1) // 16))):
        m, batch = bl.build(bs=bs, ctx=ctx, budget=vb, backend="torch_ref", device=torch.device("cpu"))
        counts[name] = bl.count(m, batch)
        assert m.total_violations == 0
    full, budget = counts["full"], counts["budget"]
    assert budget["head"].kernels - full["head"].kernels == {"verify_budget": 1}
    assert budget["head"].launches() == full["head"].launches() + 1
    assert budget["tail"].launches() == full["tail"].launches() - 2 == 4  # the TAIL verifies and writes, K and V
    assert budget["tail"].kernels == full["tail"].kernels
    assert budget["head"].elems <= full["head"].elems  # nothing outside kernels walks the full plan
    for c in (full, budget):  # outside kernels: the staging copy (one cat) at HEAD
        assert {k: n for k, n in c["head"].ops.items() if k not in bl._VIEWS} == {"cat": 1}
    # the overflow count: two ops at TAIL without a budget, inside the filter's launch with one
    assert {k: n for k, n in full["tail"].ops.items() if k not in bl._VIEWS} == {"add_": 1, "sub_": 1}
    assert {k: n for k, n in budget["tail"].ops.items() if k not in bl._VIEWS} == {}


def test_main_prints_both_variants(capsys: pytest.CaptureFixture[str]) -> None:
    assert bl.main(["--bs", "4", "--ctx", "16"]) == 0
    out = capsys.readouterr().out
    assert "full           total" in out and "budget 1/16    total" in out

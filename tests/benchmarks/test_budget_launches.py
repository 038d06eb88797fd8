"""budget_launches counts a decode forward's launches on the CPU: both count the plan's overflow at HEAD, full
verification with two torch ops, the budget inside its filter's one launch, so the budget's HEAD is one launch
fewer than full verification's less the count plus its filter; TAIL is the same (the verifies and writes); its
work outside kernels is no larger than full verification's."""

from __future__ import annotations

import pytest
import torch

from benchmarks import budget_launches as bl
from kvcanary.manager import VerifyBudget


def test_the_budget_filter_replaces_the_overflow_count_at_head_and_no_work_outside_kernels() -> None:
    bs, ctx = 8, 48
    counts: dict[str, dict[str, bl.Counts]] = {}
    for name, vb in (("full", None), ("budget", VerifyBudget(max_entries=bs * (ctx - 1) // 16))):
        m, batch = bl.build(bs=bs, ctx=ctx, budget=vb, backend="torch_ref", device=torch.device("cpu"))
        counts[name] = bl.count(m, batch)
        assert m.total_violations == 0
    full, budget = counts["full"], counts["budget"]
    assert budget["head"].kernels - full["head"].kernels == {"verify_budget": 1}
    assert budget["head"].launches() == full["head"].launches() + 1 - 2  # the filter in, the count's two ops out
    assert budget["tail"].launches() == full["tail"].launches() == 4  # the TAIL verifies and writes, K and V
    assert budget["tail"].kernels == full["tail"].kernels
    assert budget["head"].elems <= full["head"].elems  # nothing outside kernels walks the full plan
    # outside kernels: the staging copy (one cat) at HEAD, and without a budget the overflow count's two ops
    assert {k: n for k, n in full["head"].ops.items() if k not in bl._VIEWS} == {"cat": 1, "add_": 1, "sub_": 1}
    assert {k: n for k, n in budget["head"].ops.items() if k not in bl._VIEWS} == {"cat": 1}
    for c in (full, budget):
        assert {k: n for k, n in c["tail"].ops.items() if k not in bl._VIEWS} == {}


def test_main_prints_both_variants(capsys: pytest.CaptureFixture[str]) -> None:
    assert bl.main(["--bs", "4", "--ctx", "16"]) == 0
    out = capsys.readouterr().out
    assert "full           total" in out and "budget 1/16    total" in out

"""The transformers map through the manager's pinned inputs on the manager's bucketed path (a GPU's default, its
padded launches run eagerly here: what the graphs replay): a decode step's rows reach the device inside the kept
batch's staged HEAD (one unit per pinned host buffer), its read-back copy ends the TAIL, and every run ends with the
device state, tokens and reports of the run on the unpadded path, clean or with a fault."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kvcanary.integrations.transformers.faults import FaultHook, TfFault
from kvcanary.integrations.transformers.pool import PoolState
from kvcanary.integrations.transformers.session import TransformersCanary
from tests.integrations.transformers.harness import SEED, SLIDING, run
from tests.manager.graph_parity import PhaseLog


def _bucketed(monkeypatch: pytest.MonkeyPatch) -> list[PhaseLog]:
    """Put every cache's manager on the bucketed path (PoolState builds the manager at a cache's first step);
    returns the graphs made."""
    made: list[PhaseLog] = []
    init = PoolState.__init__

    def with_buckets(self: PoolState, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        caps = self.manager.capacities
        for runner in self.manager._forwards:
            runner.graphs = PhaseLog(rows_capacity=caps.write_req_capacity, tokens_capacity=caps.write_token_capacity)
            made.append(runner.graphs)

    monkeypatch.setattr(PoolState, "__init__", with_buckets)
    return made


def _state(canary: TransformersCanary) -> list[torch.Tensor]:
    return [m.state.packed.clone() for m in canary.managers if m.state.packed is not None]


@pytest.mark.parametrize("which", ["plain", pytest.param("sliding", marks=SLIDING)])
def test_the_bucketed_map_ends_as_the_unpadded_one(which: str, model: Any, hybrid: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    m = model if which == "plain" else hybrid
    eager, out = run(m)
    made = _bucketed(monkeypatch)
    padded, padded_out = run(m)
    assert padded_out == out, f"seed {SEED}"
    assert padded.reports == eager.reports == [], f"seed {SEED}"
    assert [torch.equal(a, b) for a, b in zip(_state(padded), _state(eager), strict=True)] == [True]
    runs = [p for g in made for p in g.runs]
    staged = [p for p in runs if p.startswith("head_staged")]
    assert staged, f"seed {SEED}: no decode step took the kept batch's staged HEAD"
    if which == "plain":  # the rows' copy inside the staged unit, from each host buffer in turn
        assert {p.rsplit("/", 2)[1] for p in staged if p.count("/") == 2} == {"0", "1"}
    assert {"tail/0", "tail/1"} <= set(runs)


def test_a_fault_is_reported_alike_on_the_bucketed_map(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = FaultHook(TfFault.KV_FLIP_USED)
    eager, _ = run(model, hook=hook)
    assert hook.fired_step is not None, f"seed {SEED}"
    made = _bucketed(monkeypatch)
    again = FaultHook(TfFault.KV_FLIP_USED)
    padded, _ = run(model, hook=again)
    assert again.fired_step == hook.fired_step and again.detail == hook.detail, f"seed {SEED}"
    assert eager.reports, f"seed {SEED}: the fault went unnoticed"
    key = [(r.check, r.event.violation.slot_idx, r.event.step_recorded, r.request_ids) for r in eager.reports]
    assert [(r.check, r.event.violation.slot_idx, r.event.step_recorded, r.request_ids)
            for r in padded.reports] == key, f"seed {SEED}"
    assert any(p.startswith("head_staged") for g in made for p in g.runs)
    assert [torch.equal(a, b) for a, b in zip(_state(padded), _state(eager), strict=True)] == [True]

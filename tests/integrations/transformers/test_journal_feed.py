"""The transformers guard's journal feed reads only what changed: a step looks at the block lists of the
requests whose block table changed since they were last scheduled, never at an unchanged one."""

from __future__ import annotations

from typing import Any

import pytest

from kvcanary.integrations.transformers import StepView, attach_canaries
from kvcanary.integrations.transformers.guard import TfGuard
from kvcanary.integrations.transformers.workload import generate
from tests.integrations.transformers.harness import SEED, SLIDING, prompts


class Tables:
    """A step hook keeping, per step, each scheduled request's block table (and ring) as the step sees it."""

    def __init__(self) -> None:
        self.steps: list[dict[str, tuple[list[int], list[int]]]] = []

    def __call__(self, view: StepView) -> None:
        lay = view.layout
        sw = lay.sliding
        self.steps.append({r.request_id: (list(lay.block_table.get(r.request_id, [])),
                                          list(sw.block_table.get(r.request_id, [])) if sw is not None else [])
                           for r in view.requests})

    def changed(self, step: int) -> set[str]:
        """The requests of ``step`` whose block table is new or differs from the last step that scheduled them."""
        out = set()
        for rid, (blocks, _) in self.steps[step].items():
            before = next((s[rid][0] for s in reversed(self.steps[:step]) if rid in s), None)
            if before != blocks:
                out.add(rid)
        return out


def _looked_at(model: Any, monkeypatch: pytest.MonkeyPatch, workload: list[list[int]],
               **kwargs: Any) -> tuple[Tables, list[list[str]], Any]:
    """A run with the guard on: the tables each step saw, and the requests whose block list the guard looked
    at in each step (every call of its per-request comparison)."""
    tables = Tables()
    looked: list[list[str]] = []
    compare = TfGuard._blocks_of

    def counting(self: TfGuard, rid: str, *args: Any) -> None:
        while len(looked) < len(tables.steps):
            looked.append([])
        looked[len(tables.steps) - 1].append(rid)
        compare(self, rid, *args)

    monkeypatch.setattr(TfGuard, "_blocks_of", counting)
    with attach_canaries(model, owner_check=True) as canary:
        canary.hooks.append(tables)
        generate(model, workload, **kwargs)
    assert canary.reports == [], f"seed {SEED}: clean run reported {canary.reports[0].event.message}"
    looked += [[] for _ in range(len(tables.steps) - len(looked))]
    return tables, looked, canary


def test_an_unchanged_request_costs_no_comparison(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step compares exactly the requests whose block table changed (new ones, a new block, a prefix
    block adopted); a decode step that fills no new block compares none."""
    tables, looked, canary = _looked_at(model, monkeypatch, prompts() + prompts()[:2])
    scheduled = sum(len(s) for s in tables.steps)
    assert scheduled > 0
    for step, rids in enumerate(looked):
        assert len(rids) == len(set(rids)), f"seed {SEED}: step {step} looked at a request twice: {rids}"
        assert set(rids) == tables.changed(step), (
            f"seed {SEED}: step {step} looked at {sorted(rids)}, its changed requests are "
            f"{sorted(tables.changed(step))}")
    compared = sum(len(r) for r in looked)
    assert compared == sum(g.compared for g in canary.guards)
    quiet = [s for s, rids in enumerate(looked) if not rids and tables.steps[s]]
    assert quiet, f"seed {SEED}: no step without a block-list change: the saving is not exercised"
    assert compared < scheduled / 2, f"seed {SEED}: {compared} comparisons for {scheduled} scheduled requests"


@SLIDING
def test_the_sliding_ring_is_followed_from_the_changed_requests(hybrid: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With a sliding-window layer the ring journal still hears every ring change, while the requests
    looked at are still only the changed ones (the ring grows with the full table's blocks)."""
    tables, looked, canary = _looked_at(hybrid, monkeypatch, prompts())
    for step, rids in enumerate(looked):
        assert set(rids) == tables.changed(step), f"seed {SEED}: step {step} looked at {sorted(rids)}"
    manager = canary.managers[0]
    held: dict[str, set[int]] = {}
    for seen in tables.steps:
        for rid, (_, ring) in seen.items():
            held.setdefault(rid, set()).update(ring)
    for rid, blocks in held.items():
        for b in blocks:
            hist = manager.swa_journal.history(b * manager.swa_journal.block_size)
            assert any(e.owner is not None and e.owner.id == rid for e in hist), (
                f"seed {SEED}: ring block {b} of {rid} never reached the sliding journal")

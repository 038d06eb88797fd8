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


Event = tuple[int, str, tuple[int, ...], str]


class PerRequestFeed:
    """The reference: every scheduled request's block list compared each step (what the change list saves),
    the events in the owner map's order: cache took / requests left or gave back / joins / cache let go /
    fresh blocks."""

    def __init__(self, canary: Any) -> None:
        self.canary = canary
        self.events: dict[str, list[Event]] = {"full": [], "swa": []}
        self.held: dict[str, set[int]] = {}
        self.held_swa: dict[str, set[int]] = {}
        self.cached: set[int] = set()

    def _rec(self, journal: str, step: int, kind: Any, blocks: Any, owner: str) -> None:
        if blocks:
            self.events[journal].append((step, kind.name, tuple(blocks), owner))

    def __call__(self, view: StepView) -> None:
        from kvcanary.guard import JournalKind as K

        step = self.canary.managers[0].step
        lay = view.layout
        table = lay.block_table
        cached = set(lay.cached_blocks())
        self._rec("full", step, K.CACHED, sorted(cached - self.cached), "prefix-cache")
        for rid in [r for r in self.held if r not in table]:
            self._rec("full", step, K.RELEASED, sorted(self.held.pop(rid)), rid)
            self._rec("swa", step, K.RELEASED, sorted(self.held_swa.pop(rid, set())), rid)
        sw = lay.sliding
        joined = []
        for r in view.requests:
            rid = r.request_id
            full = table.get(rid, [])
            blocks = full[: -(-(r.past_length + r.query_length) // lay.page)]
            old = self.held.get(rid, set())
            gone = old - set(full)
            self._rec("full", step, K.RELEASED, sorted(gone), rid)
            new = set(blocks) - old
            self.held[rid] = (old - gone) | set(blocks)
            done = r.past_length // lay.page
            shared = sorted({b for b in blocks[:done] if b in new})
            joined.append((rid, shared, sorted(new.difference(shared))))
            if sw is not None:
                ring = set(sw.block_table.get(rid, []))
                before = self.held_swa.get(rid, set())
                self._rec("swa", step, K.RELEASED, sorted(before - ring), rid)
                self._rec("swa", step, K.ALLOCATED, sorted(ring - before), rid)
                self.held_swa[rid] = ring
        for rid, shared, _ in joined:
            self._rec("full", step, K.SHARED, shared, rid)
        self._rec("full", step, K.RELEASED, sorted(self.cached - cached), "prefix-cache")
        self.cached = cached
        for rid, _, fresh in joined:
            self._rec("full", step, K.ALLOCATED, fresh, rid)


def _listener(out: list[Event]) -> Any:
    """A journal observer appending each call to ``out``."""

    def heard(step: int, kind: Any, blocks: list[int], owner: Any) -> None:
        out.append((step, kind.name, tuple(blocks), owner.id if owner is not None else ""))

    return heard


def _same_events(model: Any, workload: list[list[int]], **cb: int) -> None:
    with attach_canaries(model, owner_check=True) as canary:
        ref = PerRequestFeed(canary)
        canary.hooks.append(ref)
        fed: dict[str, list[Event]] = {"full": [], "swa": []}
        attached: list[int] = []

        def listen(view: StepView) -> None:
            manager = canary.managers[0]
            if id(manager) in attached:
                return
            attached.append(id(manager))
            for name, journal in (("full", manager.journal), ("swa", manager.swa_journal)):
                journal.add_observer(_listener(fed[name]))

        canary.hooks.insert(0, listen)
        generate(model, workload, **cb)
    assert canary.reports == [], f"seed {SEED}: clean run reported {canary.reports[0].event.message}"
    assert len(attached) == 1, "one cache per run"
    for name in ("full", "swa"):
        assert fed[name] == ref.events[name], (
            f"seed {SEED}: the {name} journal's events differ from the per-request feed's; first difference at "
            f"{next((i for i, (a, b) in enumerate(zip(fed[name], ref.events[name], strict=False)) if a != b), None)}")
    assert fed["full"], "the run fed the journal"


def test_the_events_and_their_order_match_a_per_request_feed(model: Any) -> None:
    """Prefix hits, de-duplicated blocks, the cache's keeps and evictions: the change-list feed records the same
    events, in the same order, as comparing every scheduled request's block list each step."""
    _same_events(model, prompts() + prompts()[:3])
    _same_events(model, prompts() + prompts()[:2], num_blocks=24, max_requests=2)


@SLIDING
def test_the_ring_events_match_a_per_request_feed(hybrid: Any) -> None:
    """A sliding-window layer: the ring journal's events too."""
    _same_events(hybrid, prompts())

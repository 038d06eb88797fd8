"""Review rF (session 12) of the manager's host path: a failed step's end and a kept batch the engine changed.

Each test was a finding, marked ``xfail(strict=True)`` until its fix landed: the sweep source raising in
``end_step`` ended no step (the step count, the read-back and the sinks stopped while it kept failing), and the
very batch object handed again with a tensor resized in place was staged into the kept bucket's old layout
(false violations, no error); it is now staged as a new batch."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import pytest

from kvcanary.guard.decision import GuardDecision
from kvcanary.manager import CanaryBatch, SweepEntries
from kvcanary.manager.reporter import ViolationEvent
from kvcanary.manager.stats import StepStats
from tests.manager.graph_parity import pad_eagerly
from tests.manager.world import Req, World, make_world


class _Steps:
    """A sink that keeps the step of every ``on_step`` it hears."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_violations(self, events: Sequence[ViolationEvent]) -> None:
        pass

    def on_decision(self, decision: GuardDecision) -> None:
        pass

    def on_step(self, stats: StepStats) -> None:
        self.steps.append(stats.step)


def _walker_failed() -> SweepEntries:
    raise RuntimeError("rF: the radix walker failed")


def test_a_sweep_source_that_raises_still_ends_the_step_and_reads_back() -> None:
    w = make_world(sweep=1)
    sink = _Steps()
    w.manager.add_sink(sink)
    a = Req(1, list(range(100, 130)), list(range(1, 6)))
    w.forward([(a, 0, 3)])
    w.step()  # no sweep source yet: step 0 ends as usual
    w.manager.set_sweep_source(_walker_failed)
    w.k[2, 0, 0] += 1.0  # a stray write into a live slot's K bytes: the next decode's verifies record it
    for n in range(2):
        w.forward([(a, 3 + n, 1)])
        with pytest.raises(RuntimeError, match="radix walker failed"):
            w.step()  # an engine that logs the canary's error and serves on
    # two more steps ended: the second one's end read the first decode's copy, which holds the flip's rows
    assert w.manager.step == 3
    assert sink.steps == [0, 1, 2]
    assert {e.violation.slot_idx for e in w.manager.events} == {2}


def _refill_resized(kept: CanaryBatch, fresh: CanaryBatch) -> None:
    """``fresh``'s values into ``kept``'s tensors, each resized in place where its shape differs."""
    for name in ("req_pool_indices", "prefix_lens", "extend_lens", "input_ids", "positions", "out_cache_loc"):
        dst, src = getattr(kept, name), getattr(fresh, name)
        if dst.shape != src.shape:
            dst.resize_(src.shape)
        dst.copy_(src)


def _three_forwards(w: World, *, resize_in_place: bool) -> None:
    """A prefill of two requests, a decode of both, then a forward in which the second one extends by two: as a
    fresh batch, or as the decode's batch object with its tensors resized and refilled in place."""
    a = Req(1, list(range(100, 130)), list(range(1, 6)))
    b = Req(2, list(range(200, 230)), [6, 7, 8, 9, 10])
    w.forward([(a, 0, 3), (b, 0, 2)])
    w.step()
    batch = w.build([(a, 3, 1), (b, 2, 1)])
    with w.manager.forward(batch):
        w.write_kv(batch.out_cache_loc.tolist())
    w.step()
    grown = w.build([(a, 4, 1), (b, 3, 2)])  # 3 tokens where the decode had 2: the same rows, another token rung
    if resize_in_place:
        _refill_resized(batch, grown)
        grown = batch
    with w.manager.forward(grown):
        w.write_kv(grown.out_cache_loc.tolist())
    w.step()


def test_a_kept_batch_resized_in_place_is_staged_as_a_fresh_one() -> None:
    fresh, resized = make_world(), make_world()
    pad_eagerly(fresh.manager)
    pad_eagerly(resized.manager)
    _three_forwards(fresh, resize_in_place=False)
    assert fresh.events() == []  # nothing was corrupted
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _three_forwards(resized, resize_in_place=True)  # staged as a new batch: its checks, its own bucket
    assert resized.events() == []  # before the fix: write_position rows of slots 3 and 4 at every HEAD and TAIL
    assert not [w for w in caught if "was resized" in str(w.message)]  # torch.cat resized the staged slice

"""An engine adapter that raises in ``apply``: the error reaches the engine from ``end_step``, and the sinks still
hear the decision and the step's end, as ``add_sink`` promises ("also when the step raises"). The decision is the
operator's only record of the isolation (its JSON event, ``kvcanary_requests_failed_total``, the health) (rD)."""

from __future__ import annotations

import pytest

from kvcanary.guard import GuardDecision
from tests.manager.test_guard import Recorder, flip_under_a, isolate_world
from tests.manager.world import World


class _Broken:
    def apply(self, decision: GuardDecision) -> None:
        raise RuntimeError("engine: cannot fail request a")


def _read_back_pending() -> tuple[World, Recorder]:
    """A world whose adapter raises, with a flip under ``a``'s slot that the next end_step or flush reads back."""
    w, rec = isolate_world()
    w.manager.set_adapter(_Broken())
    flip_under_a(w)
    return w, rec


def test_the_sinks_hear_a_decision_and_the_step_when_the_adapter_raises() -> None:
    w, rec = _read_back_pending()
    m = w.manager
    ended = m.step
    with pytest.raises(RuntimeError, match="cannot fail request a"):
        w.step()  # the read-back: a decision for a
    assert [d.failed_ids for d in rec.decisions] == [("a",)]
    assert rec.steps[-1] == ended and m.step == ended + 1
    assert [d.failed_ids for d in m.decisions] == [("a",)]


def test_a_flush_whose_adapter_raises_still_tells_the_sinks() -> None:
    w, rec = _read_back_pending()
    m = w.manager
    heard = len(rec.steps)
    with pytest.raises(RuntimeError, match="cannot fail request a"):
        m.flush()  # the same read-back, synchronously
    assert [d.failed_ids for d in rec.decisions] == [("a",)]
    assert len(rec.steps) == heard + 1 and rec.steps[-1] == m.step - 1

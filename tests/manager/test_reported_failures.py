"""``CanaryManager.report_failures``: the requests an engine adapter fails on its own (KVC-G004, a request holding a
block the decision quarantined) reach every sink as one follow-up decision, after the decision that led to them, so
the monitor counts every request failed (rE)."""

from __future__ import annotations

import pytest

from kvcanary.guard import GuardDecision, RequestFailure
from kvcanary.guard.codes import QUARANTINED
from kvcanary.guard.followup import FOLLOWUP_NOTE, quarantined_failure
from kvcanary.manager import CanaryManager
from kvcanary.monitor import Monitor
from tests.manager.test_guard import Recorder, flip_under_a, isolate_world
from tests.manager.world import World


class _FailsHolders:
    """An adapter that fails ``holders`` for holding the decision's quarantined block, as the engines' guards do
    (``raises``: then it raises, after reporting them)."""

    def __init__(self, manager: CanaryManager, holders: list[str], *, raises: bool = False) -> None:
        self.manager, self.holders, self.raises = manager, holders, raises

    def apply(self, decision: GuardDecision) -> None:
        failed = [quarantined_failure(rid, "slot(s)", [1], slot=1, step=decision.step) for rid in self.holders]
        self.manager.report_failures(failed, step=decision.step)
        if self.raises:
            raise RuntimeError("engine: cannot quarantine")


def _read_back_pending(adapter: type[_FailsHolders] | None = None, **kw: bool) -> tuple[World, Recorder]:
    """A flip under ``a``'s slot 1 that the next end_step reads back (an adapter failing ``c`` with it)."""
    w, rec = isolate_world()
    m = w.manager
    if adapter is not None:
        m.set_adapter(adapter(m, ["c"], **kw))
    flip_under_a(w)
    return w, rec


def test_the_sinks_hear_the_adapters_failures_right_after_the_decision() -> None:
    w, rec = _read_back_pending(_FailsHolders)
    m = w.manager
    mon = Monitor()
    m.add_sink(mon)
    w.step()  # the read-back: a decision for a; the adapter fails c with it
    decision, followup = rec.decisions
    assert decision.failed_ids == ("a",) and followup.failed_ids == ("c",)
    assert followup.step == decision.step and followup.notes == (FOLLOWUP_NOTE,) and not followup.events
    assert followup.fail[0].code == QUARANTINED.code
    assert list(m.decisions) == [decision]  # the manager keeps its own decisions only
    assert mon.status().requests_failed == 2


def test_an_adapter_that_raises_after_reporting_still_has_its_failures_heard() -> None:
    w, rec = _read_back_pending(_FailsHolders, raises=True)
    with pytest.raises(RuntimeError, match="cannot quarantine"):
        w.step()
    assert [d.failed_ids for d in rec.decisions] == [("a",), ("c",)]
    w.step()  # the next decision (none) hears no stale follow-up
    assert [d.failed_ids for d in rec.decisions] == [("a",), ("c",)]


def test_reported_outside_a_decision_the_sinks_hear_it_at_once_and_nothing_for_none() -> None:
    w, rec = isolate_world()
    m = w.manager
    m.report_failures([], step=3)
    assert rec.decisions == []
    f = quarantined_failure("c", "block(s)", [7, 9], slot=28, step=3)
    m.report_failures((f,), step=3)
    assert [(d.step, d.fail) for d in rec.decisions] == [(3, (f,))]
    assert f.message == f"kv-canary: request c failed: it holds quarantined block(s) [7, 9] {QUARANTINED.tag}"


@pytest.mark.parametrize(("failures", "step", "match"), [
    ("c", 1, r"failures must be a sequence of RequestFailure, got str 'c'"),
    (None, 1, r"failures must be a sequence of RequestFailure, got NoneType None"),
    (["c"], 1, r"failures must be RequestFailure items, got str 'c'"),
    ([], True, r"step must be an int \(the step of the decision whose quarantine failed them\), got bool True"),
    ([], "1", r"step must be an int \(the step of the decision whose quarantine failed them\), got str '1'"),
])
def test_report_failures_refuses_a_value_of_the_wrong_type(failures: object, step: object, match: str) -> None:
    w, rec = isolate_world()
    with pytest.raises(TypeError, match=rf"^kv-canary: report_failures: {match}$"):
        w.manager.report_failures(failures, step=step)  # type: ignore[arg-type]
    assert rec.decisions == []


def test_a_quarantined_failure_is_a_request_failure() -> None:
    f = quarantined_failure("r", "ring block(s)", [2], slot=8, step=5)
    assert isinstance(f, RequestFailure) and (f.check, f.slot, f.position, f.step) == ("quarantine", 8, -1, 5)

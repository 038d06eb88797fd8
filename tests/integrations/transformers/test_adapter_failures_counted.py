"""The guard's records are bounded (``guard_history``) on the promise that monitoring counts every failure
(docs/policies.md "What stays in memory", ``TfGuard.failed``'s docstring). The transformers guard also fails,
on its own, every other request that holds a quarantined block (KVC-G004): no decision names those, so the
guard reports them to the manager's sinks as a follow-up decision of only those failures (rE)."""

from __future__ import annotations

from kvcanary.guard import GuardDecision
from kvcanary.guard.codes import QUARANTINED
from kvcanary.guard.followup import FOLLOWUP_NOTE, QUARANTINE_CHECK
from kvcanary.monitor import HealthSink
from tests.integrations.transformers.guard_fakes import FakeProcessor, GuardRig, failure
from tests.manager.test_guard import Recorder


def test_every_request_the_guard_fails_is_counted_by_the_monitor() -> None:
    rig = GuardRig(guard_history=1)
    guard, health, heard = rig.guard, HealthSink(), Recorder()
    rig.manager.sinks += [health, heard]
    try:
        rig.step([("a", [5]), ("c", [5, 6]), ("d", [7])], ["a", "c", "d"])  # c shares a's block 5
        decision = GuardDecision(step=rig.manager.step, events=(), fail=(failure("a"),), quarantine=(5,))
        for sink in rig.manager.sinks:
            sink.on_decision(decision)  # what the manager tells its sinks
        guard.apply(decision)
        guard.carry_out(FakeProcessor(["a", "c", "d"]))
        assert guard.failed.total == 2 and "KVC-G004" in guard.failed["c"]  # c failed for holding block 5
        assert health.status().requests_failed == guard.failed.total
        followup = heard.decisions[1]
        assert len(heard.decisions) == 2 and followup.step == decision.step and followup.notes == (FOLLOWUP_NOTE,)
        assert not (followup.events or followup.quarantine or followup.quarantine_swa or followup.finished)
        (f,) = followup.fail
        assert (f.request_id, f.code, f.alias, f.check, f.slot, f.position, f.fail_reasons, f.step) == (
            "c", QUARANTINED.code, None, QUARANTINE_CHECK, 5 * rig.layout.stride, -1, (), decision.step)
        assert f.message == guard.failed["c"]  # the error the request received
    finally:
        guard.close()


def test_no_follow_up_when_the_quarantine_fails_nobody_else() -> None:
    rig = GuardRig()
    guard, heard = rig.guard, Recorder()
    rig.manager.sinks.append(heard)
    try:
        rig.step([("a", [5]), ("d", [7])], ["a", "d"])
        guard.apply(GuardDecision(step=rig.manager.step, events=(), fail=(failure("a"),), quarantine=(5,)))
        guard.carry_out(FakeProcessor(["a", "d"]))
        assert list(guard.failed) == ["a"] and heard.decisions == []
    finally:
        guard.close()


def test_a_holder_no_longer_running_is_not_reported() -> None:
    """c still in the block table but gone from transformers' scheduler when the decision is carried out:
    nothing failed it, so nothing is reported."""
    rig = GuardRig()
    guard, heard = rig.guard, Recorder()
    rig.manager.sinks.append(heard)
    try:
        rig.step([("a", [5]), ("c", [5, 6])], ["a", "c"])
        guard.apply(GuardDecision(step=rig.manager.step, events=(), fail=(failure("a"),), quarantine=(5,)))
        guard.carry_out(FakeProcessor(["a"]))
        assert list(guard.failed) == ["a"] and heard.decisions == []
    finally:
        guard.close()


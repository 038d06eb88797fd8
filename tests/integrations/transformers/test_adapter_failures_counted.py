"""The guard's records are bounded (``guard_history``) on the promise that monitoring counts every failure
(docs/policies.md "What stays in memory", ``TfGuard.failed``'s docstring). The transformers guard also fails,
on its own, every other request that holds a quarantined block (KVC-G004): no decision names those, so no
sink hears of them, and once let go from ``failed`` they are counted nowhere the operator looks (rE)."""

from __future__ import annotations

import pytest

from kvcanary.guard import GuardDecision
from kvcanary.monitor import HealthSink
from tests.integrations.transformers.guard_fakes import FakeProcessor, GuardRig, failure


@pytest.mark.xfail(strict=True, reason="rE: KVC-G004 failures made by the adapter reach no sink")
def test_every_request_the_guard_fails_is_counted_by_the_monitor() -> None:
    rig = GuardRig(guard_history=1)
    guard, health = rig.guard, HealthSink()
    try:
        rig.step([("a", [5]), ("c", [5, 6])], ["a", "c"])  # c shares a's block 5
        decision = GuardDecision(step=rig.manager.step, events=(), fail=(failure("a"),), quarantine=(5,))
        health.on_decision(decision)  # what the manager tells its sinks
        guard.apply(decision)
        guard.carry_out(FakeProcessor(["a", "c"]))
        assert guard.failed.total == 2 and "KVC-G004" in guard.failed["c"]  # c failed for holding block 5
        assert health.status().requests_failed == guard.failed.total
    finally:
        guard.close()

"""The transformers guard's records stay bounded (``CanaryConfig.guard_history``): a server failing requests
for weeks keeps the newest failures, late requests and decisions, and the ids it watches as failing."""

from __future__ import annotations

from tests.integrations.transformers.guard_fakes import GuardRig


def test_failed_and_decisions_keep_the_newest_and_failing_ids_go_with_them() -> None:
    rig = GuardRig(guard_history=3)
    guard = rig.guard
    try:
        for i in range(10):  # one request a step, failed by that step's decision, gone the next step
            rid = f"u{i}"
            rig.step([(rid, [i + 1])], [rid])
            rig.fail([rid])
            rig.step([(rid, None)], [])
            assert rig.manager.journal.finished_step(rid) is None, "a failed request's leaving is no finish"
        assert list(guard.failed) == ["u7", "u8", "u9"] and guard.failed["u9"] == "u9 failed"
        assert guard.failed.total == 10 and guard.failed.dropped == 7
        assert guard._failing == {"u7", "u8", "u9"}
        assert len(guard.decisions) == 3 and guard.decisions.total == 10
        assert [d.fail[0].request_id for d in guard.decisions] == ["u7", "u8", "u9"]
        assert not guard.late and not guard._held
    finally:
        guard.close()


def test_late_keeps_the_newest_requests_named_after_they_finished() -> None:
    rig = GuardRig(guard_history=2)
    guard = rig.guard
    try:
        for i in range(5):
            rid = f"done{i}"
            rig.step([(rid, [i + 1])], [rid])
            rig.step([(rid, None)], [])  # served to its end
            rig.fail([rid], active=[])  # the decision came after it finished
        assert dict(guard.late) == {"done3": "done3 failed", "done4": "done4 failed"}
        assert guard.late.total == 5 and guard.late.dropped == 3 and not guard.failed and not guard._failing
    finally:
        guard.close()


def test_two_requests_failed_with_room_for_one_leave_unfinished_and_the_first_is_forgotten() -> None:
    """Two requests failed by one decision with room for one: each leaves, unfinished, as it is failed
    (transformers frees its blocks), so the first is forgotten as soon as it is let go from ``failed``; the
    rows' later sync of their leaving files nothing more, and no finish."""
    rig = GuardRig(guard_history=1)
    guard, j = rig.guard, rig.manager.journal
    try:
        rig.step([("a", [1]), ("b", [2])], ["a", "b"])
        rig.fail(["a", "b"])
        assert list(guard.failed) == ["b"] and guard._failing == {"b"} and not guard._held
        recorded = j.recorded
        rig.step([("a", None), ("b", None)], [])
        assert j.finished_step("a") is None and j.finished_step("b") is None and j.recorded == recorded
        assert guard._failing == {"b"}
        rig.step([("a", [3])], ["a"])  # "a" comes back: a new request, served to its end
        rig.step([("a", None)], [])
        assert j.finished_step("a") == rig.manager.step - 1
    finally:
        guard.close()


def test_a_retry_after_the_failure_was_let_go_is_a_new_request() -> None:
    """The same id reused, as ``transformers serve`` does with a client's ``X-Request-ID``: the retry of an
    id whose failure was already let go from the record fails and finishes as any other request."""
    rig = GuardRig(guard_history=1)
    guard, j = rig.guard, rig.manager.journal
    try:
        rig.step([("x", [1])], ["x"])
        rig.fail(["x"])
        rig.step([("x", None)], [])
        rig.step([("y", [2])], ["y"])
        rig.fail(["y"])  # lets "x" go
        assert list(guard.failed) == ["y"] and guard._failing == {"y"}
        rig.step([("y", None), ("x", [3])], ["x"])  # the client retries "x"
        rig.fail(["x"])
        assert list(guard.failed) == ["x"] and guard.failed.total == 3 and guard._failing == {"x"}
        rig.step([("x", None)], [])
        assert j.finished_step("x") is None and guard._failing == {"x"}
    finally:
        guard.close()


def test_without_a_bound_every_record_is_kept() -> None:
    rig = GuardRig(guard_history=None)
    guard = rig.guard
    try:
        for i in range(50):
            rid = f"r{i}"
            rig.step([(rid, [i + 1])], [rid])
            rig.fail([rid])
            rig.step([(rid, None)], [])
        assert len(guard.failed) == 50 and len(guard._failing) == 50 and len(guard.decisions) == 50
        assert guard.failed.dropped == 0 and guard.decisions.dropped == 0
    finally:
        guard.close()

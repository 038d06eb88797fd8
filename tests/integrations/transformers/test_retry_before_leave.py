"""A client's retry scheduled in the step right after its failure: transformers frees the failed request's
blocks in ``carry_out`` and the retry takes new ones under the same id before the rows' next sync, so the
sync reports a changed block list and no leave. The guard then treats the retry as the failed request
still going on, and the retry's own finish is never filed (rE; also before session 11's bound)."""

from __future__ import annotations

import pytest

from tests.integrations.transformers.guard_fakes import GuardRig


@pytest.mark.parametrize("guard_history", [1, None])
def test_a_retry_that_replaces_its_failed_id_within_one_sync_finishes(guard_history: int | None) -> None:
    rig = GuardRig(guard_history=guard_history)
    guard, j = rig.guard, rig.manager.journal
    try:
        rig.step([("a", [1]), ("b", [2])], ["a", "b"])
        rig.fail(["a", "b"])  # with room for one, "a" is let go from failed while it still holds block 1
        assert j.holders(1) == [] and j.holders(2) == []  # transformers freed them: the failed requests left
        rig.step([("a", [3]), ("b", None)], ["a"])  # the retry of "a" holds block 3: no leave in between
        rig.step([("a", None)], [])  # the retry is served to its end
        assert j.finished_step("a") == rig.manager.step - 1
        assert "a" not in guard._failing
    finally:
        guard.close()

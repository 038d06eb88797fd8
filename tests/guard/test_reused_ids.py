"""The isolate policy against request ids an engine hands out again (review rA, wave 3).

``transformers serve`` takes the client's ``X-Request-ID`` as the engine's request id and keeps one cache (one
manager, one :class:`Isolation`) for the server's life, so an id comes back whenever a client retries with
the same header (the failure codes' own advice is "retry the request") or sends a fixed one. Each test pins
a decision for the second request of an id: once the id takes a block again the journal forgets the first
request's finish and failure, so the second is failed or reported on its own."""

from __future__ import annotations

import pytest

from kvcanary.guard import JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.guard import journal as journal_module
from kvcanary.guard.journal_codes import OwnerCodes
from kvcanary.guard.policy import Isolation
from kvcanary.manager import ViolationEvent
from kvcanary.violations import Violation
from tests.integrations.transformers.guard_fakes import GuardRig

K = JournalKind


def _req(rid: str) -> Owner:
    return Owner(OwnerKind.REQUEST, rid)


def _violation(slot: int, step_recorded: int) -> ViolationEvent:
    """A verify violation of ``slot`` recorded at ``step_recorded`` (kernel kind 0, one reason bit)."""
    return ViolationEvent(Violation.from_row((0, slot, 0, 1, 2, 3, 4, 1)), "", 0, step_recorded, step_recorded + 1)


def _journals() -> tuple[SlotJournal, SlotJournal]:
    return SlotJournal(block_size=1, capacity=64), SlotJournal(block_size=1, capacity=64)


def test_a_live_request_reusing_a_finished_id_is_failed_not_reported() -> None:
    j, swa = _journals()
    j.record(1, K.ALLOCATED, [5], _req("r1"))  # the first request r1 ...
    j.record(3, K.RELEASED, [5], _req("r1"))
    j.finish("r1", 3)  # ... finished in step 3 (its output returned)
    j.record(10, K.ALLOCATED, [7], _req("r1"))  # the client sends r1 again; it reads block 7
    d = Isolation(j, swa).decide([_violation(7, 11)], 12)  # block 7 corrupt while the new r1 reads it
    assert list(d.failed_ids) == ["r1"] and not d.finished, (d.failed_ids, d.finished)


def test_a_retry_with_the_id_of_a_failed_request_is_failed_again() -> None:
    j, swa = _journals()
    iso = Isolation(j, swa)
    j.record(1, K.ALLOCATED, [5], _req("r1"))
    first = iso.decide([_violation(5, 2)], 3)
    assert list(first.failed_ids) == ["r1"]  # the first r1 is failed; the engine frees its blocks
    j.record(4, K.RELEASED, [5], _req("r1"))
    j.record(10, K.ALLOCATED, [7], _req("r1"))  # the client retries with the same X-Request-ID
    second = iso.decide([_violation(7, 11)], 12)  # and the retry reads a block that is corrupt in turn
    assert list(second.failed_ids) == ["r1"], second


def test_a_failed_request_is_failed_once_while_its_id_takes_no_block() -> None:
    """Without a retry, a request named again (its block read back corrupt a second time) is not failed twice."""
    j, swa = _journals()
    iso = Isolation(j, swa)
    j.record(1, K.ALLOCATED, [5, 6], _req("r1"))
    assert list(iso.decide([_violation(5, 2)], 3).failed_ids) == ["r1"]
    j.record(3, K.WRITTEN, [9], _req("r2"))  # another request's events: r1 stays failed
    again = iso.decide([_violation(6, 3)], 4)
    assert not again.failed_ids and not again.finished, again
    assert j.ended("r1") and swa.ended("r1")


def test_each_finished_request_of_an_id_is_reported_once() -> None:
    """Two finished requests with one id, each named by a violation read back after it finished: each is
    reported once, with its own finish step."""
    j, swa = _journals()
    iso = Isolation(j, swa)
    j.record(1, K.ALLOCATED, [5], _req("r1"))
    j.record(2, K.RELEASED, [5], _req("r1"))
    j.finish("r1", 2)
    first = iso.decide([_violation(5, 1)], 3)
    assert [(f.request_id, f.finished_step) for f in first.finished] == [("r1", 2)] and not first.failed_ids
    assert not iso.decide([_violation(5, 1)], 3).finished  # reported once
    j.record(5, K.SHARED, [7], _req("r1"))  # the id comes back (a prefix hit: SHARED counts as taking a block)
    assert j.finished_step("r1") is None
    j.record(6, K.RELEASED, [7], _req("r1"))
    j.finish("r1", 6)
    second = iso.decide([_violation(7, 5)], 7)
    assert [(f.request_id, f.finished_step) for f in second.finished] == [("r1", 6)] and not second.failed_ids


def test_a_steady_batch_restarts_an_id_that_ended_after_its_owners_were_checked() -> None:
    """``record_each`` with the same owners list as its last call (a steady batch, whose owner codes are
    reused) still sees an id in it that finished or ended since that call."""
    j = SlotJournal(block_size=1, capacity=64)
    batch = [_req("a"), _req("b")]
    j.record_each(1, K.ALLOCATED, [1, 2], batch)
    j.finish("b", 1)
    j.end("a")
    j.record_each(2, K.WRITTEN, [1, 2], batch, [0, 0], [0, 0])  # the same list: both come back
    assert j.finished_step("b") is None and not j.ended("a")
    j.finish("a", 2)
    j.record_each(3, K.RELEASED, [1], [_req("a")])  # a release is no new request
    j.record_each(3, K.CACHED, [3], [Owner(OwnerKind.CACHE, "a")])  # nor a cache entry with the same name
    assert j.finished_step("a") == 2


def test_the_journal_keeps_at_most_max_finished_ended_ids() -> None:
    """Ends are bounded as finishes are, and the ids watched for a new request with them too (a server's
    failed and finished ids never pile up)."""
    j = SlotJournal(block_size=1, max_finished=2)
    for i, rid in enumerate("abc"):
        j.end(rid)
        j.finish(f"f{rid}", i)
    assert not j.ended("a") and j.ended("b") and j.ended("c")
    assert j.finished_step("fa") is None and j.finished_step("fc") == 2
    assert sorted(j._watch.values()) == ["b", "c", "fb", "fc"]  # the watch forgets what neither bound keeps


def test_watched_ids_survive_an_owner_table_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watched ids' owner codes are kept and renumbered when the owner table is rebuilt: an id that
    finished before a rebuild and takes a block after it is a new request."""
    monkeypatch.setattr(journal_module, "OwnerCodes", lambda: OwnerCodes(floor=8))
    j = SlotJournal(block_size=1, capacity=64)
    j.record(0, K.ALLOCATED, [1], _req("old"))
    j.record(0, K.RELEASED, [1], _req("old"))
    j.finish("old", 0)
    for i in range(40):  # many new owners, each gone at once: the table is rebuilt several times
        j.record_each(i + 1, K.ALLOCATED, [2], [_req(f"x{i}")])
        j.record_each(i + 1, K.FREED, [2], [None])
    assert j.finished_step("old") == 0
    j.record(50, K.ALLOCATED, [3], _req("old"))
    assert j.finished_step("old") is None


def test_the_transformers_guard_finishes_the_retry_of_a_failed_request() -> None:
    """A request failed by a decision leaves unfinished; a retry with its id that is served to its end is
    filed as finished in both journals (the leaving of a failed id used to be no finish forever)."""
    rig = GuardRig()
    m, guard = rig.manager, rig.guard
    try:
        rig.step([("r1", [1])], ["r1"])
        rig.fail(["r1"])
        assert list(guard.failed) == ["r1"] and not guard.late
        rig.step([("r1", None)], [])  # the failed r1 leaves: no finish
        assert m.journal.finished_step("r1") is None
        rig.step([("r1", [2])], ["r1"])  # the client retries with the same id
        rig.step([("r1", None)], [])  # and the retry is served to its end
        assert m.journal.finished_step("r1") == m.step - 1 and m.swa_journal.finished_step("r1") == m.step - 1
        rig.fail(["r1"], active=[])  # named after it finished
        assert list(guard.late) == ["r1"]
    finally:
        guard.close()


@pytest.mark.parametrize("first", ["freed", "refused"])
def test_a_steady_batch_cached_by_an_unchecked_call_still_restarts_its_ids(first: str) -> None:
    """The owners list an ADD call reuses from the last call was cached by a call that checked nothing: a
    release-type call (no ADD), or one refused for going back a step. The ADD call must still see a watched id."""
    j = SlotJournal(block_size=1, capacity=64)
    j.finish("a", 1)
    j.record_each(5, K.WRITTEN, [0], [_req("b")])  # the cached owners checked against the watch as it is now
    if first == "freed":
        j.record_each(6, K.FREED, [1], [_req("a")])  # a new list, cached: no ADD, so not checked
    else:
        with pytest.raises(ValueError, match="step must not go back"):
            j.record_each(3, K.WRITTEN, [1], [_req("a")])  # refused, yet its list was cached
    j.record_each(7, K.WRITTEN, [1], [_req("a")])  # the same owners again: "a" takes a block
    assert j.finished_step("a") is None


def test_record_restarts_a_watched_id_when_its_call_rebuilds_the_owner_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refused call can grow the owner table past its rebuild point without rebuilding it; the next
    ``record`` rebuilds it inside, and must look its owner's code up again after that."""
    monkeypatch.setattr(journal_module, "OwnerCodes", lambda: OwnerCodes(floor=8))
    j = SlotJournal(block_size=1, capacity=64)
    j.record(1, K.FREED, [0])
    with pytest.raises(ValueError, match="step must not go back"):
        j.record_each(0, K.WRITTEN, [0] * 4, tuple(_req(f"x{i}") for i in range(4)))  # codes 0-3, named nowhere
    j.record(1, K.ALLOCATED, [1], _req("w"))  # code 4
    j.finish("w", 1)
    with pytest.raises(ValueError, match="step must not go back"):
        j.record_each(0, K.WRITTEN, [0] * 5, tuple(_req(f"y{i}") for i in range(5)))  # 10 codes: due, not rebuilt
    j.record(2, K.ALLOCATED, [2], _req("w"))  # rebuilds the table ("w" becomes code 0), then checks the watch
    assert j.finished_step("w") is None

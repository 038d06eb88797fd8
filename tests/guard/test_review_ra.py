"""Review rA (wave 3): the isolate policy against request ids an engine hands out again.

``transformers serve`` takes the client's ``X-Request-ID`` as the engine's request id and keeps one cache (one
manager, one :class:`Isolation`) for the server's life, so an id comes back whenever a client retries with
the same header (the failure codes' own advice is "retry the request") or sends a fixed one. Each test pins
a decision that goes wrong for the second request of an id; they are xfail until the policy tells the two
apart (e.g. forget an id's finish and failure when its owner takes a block again)."""

from __future__ import annotations

import pytest

from kvcanary.guard import JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.guard.policy import Isolation
from kvcanary.manager import ViolationEvent
from kvcanary.violations import Violation

K = JournalKind


def _req(rid: str) -> Owner:
    return Owner(OwnerKind.REQUEST, rid)


def _violation(slot: int, step_recorded: int) -> ViolationEvent:
    """A verify violation of ``slot`` recorded at ``step_recorded`` (kernel kind 0, one reason bit)."""
    return ViolationEvent(Violation.from_row((0, slot, 0, 1, 2, 3, 4, 1)), "", 0, step_recorded, step_recorded + 1)


def _journals() -> tuple[SlotJournal, SlotJournal]:
    return SlotJournal(block_size=1, capacity=64), SlotJournal(block_size=1, capacity=64)


@pytest.mark.xfail(strict=True, reason="rA: a request id that finished once is taken as finished forever: a "
                   "later live request with the same id that read corrupt KV is reported, not failed")
def test_a_live_request_reusing_a_finished_id_is_failed_not_reported() -> None:
    j, swa = _journals()
    j.record(1, K.ALLOCATED, [5], _req("r1"))  # the first request r1 ...
    j.record(3, K.RELEASED, [5], _req("r1"))
    j.finish("r1", 3)  # ... finished in step 3 (its output returned)
    j.record(10, K.ALLOCATED, [7], _req("r1"))  # the client sends r1 again; it reads block 7
    d = Isolation(j, swa).decide([_violation(7, 11)], 12)  # block 7 corrupt while the new r1 reads it
    assert list(d.failed_ids) == ["r1"] and not d.finished, (d.failed_ids, d.finished)


@pytest.mark.xfail(strict=True, reason="rA: a request id failed once is never failed again: a retry with the "
                   "same id that reads newly corrupt KV keeps serving")
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

"""Review of the columnar slot journal (issue 35): inputs its machine columns cannot tell apart from their
reserved values, calls it must refuse with a clear error (and record nothing), and a window it no longer
covers, which the isolate policy must say it may have answered short. Each test pins a failure of the
journal as rewritten; the fix each expects is in its docstring."""

from __future__ import annotations

import pytest

from kvcanary.guard import JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.guard.policy import Isolation
from kvcanary.manager import ViolationEvent
from kvcanary.violations import Violation
from tests.manager.journal_reference import ReferenceJournal

K = JournalKind
TOP_POSITION = (1 << 64) - 1
"""A uint64 position equal to the journal's "no position" value."""


def req(rid: str) -> Owner:
    return Owner(OwnerKind.REQUEST, rid)


def test_a_position_equal_to_the_no_position_value_is_refused_not_read_back_as_none() -> None:
    """Positions are uint64 columns with 2**64 - 1 meaning None; the C-level fast path (``array("Q", ...)``)
    takes 2**64 - 1 as a position and :meth:`history` then reads it back as None (a write that names no
    position). Fix: refuse it on the fast paths as the slow path does (e.g. ``NO_POSITION in out`` after the
    conversion sends the call to :func:`_positions`, which raises)."""
    j = SlotJournal(block_size=1, capacity=16)
    with pytest.raises(ValueError, match=r"firsts must be positions in \[0, 2\*\*64 - 1\)"):
        j.record_each(0, K.WRITTEN, [1], [req("a")], [TOP_POSITION], [TOP_POSITION])
    with pytest.raises(ValueError, match=r"first_position must be positions in \[0, 2\*\*64 - 1\)"):
        j.record(0, K.ALLOCATED, [2], req("a"), first_position=TOP_POSITION, last_position=3)
    assert j.recorded == 0 and j.history(1) == [] and j.history(2) == []


def test_a_block_id_past_uint64_is_named_in_the_error() -> None:
    """A block id of 2**64 or more fails ``array("Q", ...)`` with OverflowError; the error then looks for a
    non-int or negative block, finds none, and says ``got None``. Fix: name the first block that is not in
    ``[0, max_blocks)`` (``b < 0 or b >= self.max_blocks``)."""
    j = SlotJournal(block_size=1, max_blocks=8, capacity=16)
    with pytest.raises(ValueError, match=r"max_blocks=8\), got 18446744073709551616"):
        j.record(0, K.ALLOCATED, [1, 1 << 64], req("a"))
    with pytest.raises(ValueError, match=r"max_blocks=8\), got 18446744073709551616"):
        j.record_each(0, K.ALLOCATED, [1, 1 << 64], [req("a"), req("b")])
    assert j.recorded == 0 and j.holders(1) == []


def test_a_step_outside_int64_is_a_value_error_naming_the_range() -> None:
    """A step of 2**63 is an int: the error says ``step must be an int, got int 9223372036854775808`` (a
    TypeError). Fix: on OverflowError raise ValueError ``step must be in [-2**63, 2**63)``."""
    j = SlotJournal(block_size=1, capacity=16)
    with pytest.raises(ValueError, match=r"step must be in \[-2\*\*63, 2\*\*63\)"):
        j.record(1 << 63, K.ALLOCATED, [1], req("a"))
    with pytest.raises(ValueError, match=r"step must be in \[-2\*\*63, 2\*\*63\)"):
        j.record_each(1 << 63, K.ALLOCATED, [1], [req("a")])
    assert j.recorded == 0


def test_add_observer_refuses_kinds_that_are_not_a_collection_of_journal_kinds() -> None:
    """``kinds`` is frozenset()-ed unchecked: one JournalKind (a str enum) becomes the set of its letters and a
    misspelt kind is kept, so the observer (the owner map, which frees and locks slots) silently hears nothing.
    Fix: check each entry is a JournalKind (TypeError naming ``kinds``), refusing a bare JournalKind / str."""
    j = SlotJournal(block_size=1, capacity=16)
    heard: list[JournalKind] = []
    with pytest.raises(TypeError, match="kinds"):
        j.add_observer(lambda step, kind, blocks, owner: heard.append(kind), kinds=K.FREED)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="kinds"):
        j.add_observer(lambda step, kind, blocks, owner: heard.append(kind), kinds=["freed-typo"])  # type: ignore[list-item]
    j.record(1, K.FREED, [1])
    assert heard == []  # a refused observer is not kept


def test_a_window_the_ring_no_longer_covers_never_names_an_owner_the_reference_does_not() -> None:
    """Steps are never checked to advance. A holder folded at step 10, then an event filed at step 3: the
    base's join filter drops the step-10 holder, the ring names the step-3 one, while the reference (its
    replay stops at the first event past the window) names nobody: the uncovered window names an owner the
    reference does not, which the journal's documents say never happens. Fix (either passes): refuse a
    step below the journal's latest (ValueError naming ``step``, nothing recorded), or answer as the
    reference."""
    real, ref = SlotJournal(block_size=1, capacity=16), ReferenceJournal(block_size=1)
    for j in (real, ref):
        j.record(10, K.ALLOCATED, [0], req("x"))
        for _ in range(20):  # fold x's event out of the ring
            j.record(10, K.WRITTEN, [1], req("filler"))
    assert not real.covers(0)
    try:
        real.record(3, K.SHARED, [0], req("y"))
    except ValueError as err:
        assert "step" in str(err)
        assert real.recorded == 21
        return
    ref.record(3, K.SHARED, [0], req("y"))
    assert set(real.owners_between(0, 0, 5)) <= set(ref.owners_between(0, 0, 5))


def _violation(slot: int, step_recorded: int) -> ViolationEvent:
    """A verify violation of ``slot`` recorded at ``step_recorded`` (kernel kind 0, one reason bit)."""
    return ViolationEvent(Violation.from_row((0, slot, 0, 1, 2, 3, 4, 1)), "", 0, step_recorded, step_recorded + 1)


def test_isolation_notes_a_violation_whose_window_the_journal_no_longer_covers() -> None:
    """The isolate policy fails exactly the requests ``owners_between`` names; for a window older than the
    ring (``covers(step_recorded)`` false) that can miss a request that held the slot and left, and the
    decision says nothing about it: the request is neither failed nor reported. Fix: in
    :meth:`Isolation.decide`, when ``not journal.covers(e.step_recorded)``, add a note naming the slot and
    the window (the holders may be incomplete), so the operator knows the isolation may be short."""
    def decide(filler_events: int) -> tuple[list[str], list[str]]:
        j, swa = SlotJournal(block_size=1, capacity=16), SlotJournal(block_size=1, capacity=16)
        j.record(1, K.ALLOCATED, [5], req("gone"))
        j.record(2, K.RELEASED, [5], req("gone"))
        j.record(2, K.FREED, [5])
        j.record(3, K.ALLOCATED, [5], req("now"))
        for _ in range(filler_events):
            j.record(4, K.WRITTEN, [9], req("filler"))
        d = Isolation(j, swa).decide([_violation(5, 1)], 6)
        return list(d.failed_ids), list(d.notes)

    covered_failed, covered_notes = decide(4)
    assert covered_failed == ["gone", "now"]  # the window is in the ring: both readers fail
    failed, notes = decide(40)
    assert failed == ["now"]  # "gone"'s stay was folded away: the journal cannot name it any more
    extra = [n for n in notes if n not in covered_notes]
    assert any("5" in n for n in extra), f"no note says the window of slot 5 is not covered: {notes}"


def test_a_numpy_block_id_leaves_no_numpy_int_in_the_journal() -> None:
    """A block passed as a numpy int (a 0-d tensor alike) sizes the dense arrays as a Python int."""
    import numpy as np

    j = SlotJournal(block_size=1, capacity=16)
    j.record(0, K.ALLOCATED, [np.int64(5000)], req("a"))
    assert type(j._blocks) is int and j._blocks > 5000
    assert j.holders(5000) == [req("a")]


def test_a_step_below_the_latest_recorded_is_refused_and_records_nothing() -> None:
    """Windows replay a block's events in order and stop at the first past the window: steps must not go
    back. The same step again is fine; a step below the latest is a ValueError naming both."""
    j = SlotJournal(block_size=1, capacity=16)
    j.record(5, K.ALLOCATED, [1], req("a"))
    j.record_each(5, K.SHARED, [1], [req("b")])
    back = r"step must not go back: got 4, below the latest recorded step 5"
    with pytest.raises(ValueError, match=back):
        j.record(4, K.RELEASED, [1], req("a"))
    with pytest.raises(ValueError, match=back):
        j.record_each(4, K.RELEASED, [1], [req("b")])
    assert j.recorded == 2 and j.holders(1) == [req("a"), req("b")] and j.latest_step == 5
    j.record(6, K.RELEASED, [1], req("a"))
    assert j.holders(1) == [req("b")]


def test_positions_whose_bytes_run_into_the_no_position_value_are_kept() -> None:
    """The fast path looks for eight 0xff bytes in a row; two positions can make such a run across their
    boundary (either byte order) and are still positions: they take the slow path and are kept."""
    hi, lo = 0xFFFF_FFFF_0000_0000, 0x0000_0000_FFFF_FFFF
    j = SlotJournal(block_size=1, capacity=16)
    j.record_each(0, K.WRITTEN, [1, 1, 1, 1], [req("a")] * 4, [hi, lo, lo, hi], [lo, hi, hi, lo])
    j.record(1, K.WRITTEN, [2], req("a"), first_position=TOP_POSITION - 1, last_position=TOP_POSITION - 1)
    assert [(e.first_position, e.last_position) for e in j.history(1)] == [(hi, lo), (lo, hi), (lo, hi), (hi, lo)]
    assert [(e.first_position, e.last_position) for e in j.history(2)] == [(TOP_POSITION - 1,) * 2]


def test_isolation_quarantines_at_the_journals_latest_step_when_another_guard_filed_later() -> None:
    """Two managers share a guard adapter (the demo engine's target and draft): the first manager's end_step
    has the adapter file the step's end (its step already advanced) into the second's journal before the
    second decides on its own violations at its own, older step. The quarantine is filed at the journal's
    latest step, not refused as a step going back, and the decision still fails the slot's holder."""
    j, swa = SlotJournal(block_size=1, capacity=16), SlotJournal(block_size=1, capacity=16)
    j.record(3, K.ALLOCATED, [5], req("reader"))
    j.record(11, K.RELEASED, [7], req("other"))  # the other guard's filing, at the next step
    d = Isolation(j, swa).decide([_violation(5, 9)], 10)
    assert list(d.failed_ids) == ["reader"]
    assert j.quarantined(5)
    assert [(e.step, e.kind) for e in j.history(5)][-1] == (11, K.QUARANTINED)

"""Attribution over hand-built journals: each ownership pattern, and the clean one."""

from __future__ import annotations

from kvcanary.consts import CanaryLaunchTag, FailReason
from kvcanary.evidence import BugClass, attribute, claimants_at, first_anomaly
from kvcanary.guard import JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.violations import Violation

A, B = Owner(OwnerKind.REQUEST, "a"), Owner(OwnerKind.REQUEST, "b")
CACHE = Owner(OwnerKind.CACHE, "tree")


def _row(bits: FailReason, slot: int = 5, tag: CanaryLaunchTag = CanaryLaunchTag.HEAD_K_FULL) -> Violation:
    return Violation(int(tag), slot, 3, 7, 9, 1, 2, int(bits))


RECORD = FailReason.VERIFY_CHAIN_HASH_MISMATCH | FailReason.VERIFY_POSITION_MISMATCH


def test_an_allocation_while_another_request_holds_the_block_is_a_double_allocation() -> None:
    j = SlotJournal(block_size=1)
    j.record(1, JournalKind.ALLOCATED, [5], A)
    j.record(1, JournalKind.WRITTEN, [5], A, first_position=3, last_position=3)
    j.record(4, JournalKind.ALLOCATED, [5], B)
    j.record(4, JournalKind.WRITTEN, [5], B, first_position=0, last_position=0)
    att = attribute([_row(RECORD)], j.history(5), step=5, slot=5)
    assert att.bug_class is BugClass.DOUBLE_ALLOCATION
    assert att.writer == "request:b" and "request:a" in att.holders
    assert att.anomaly_step == 4


def test_an_allocation_carrying_positions_is_the_blocks_write() -> None:
    # the demo engine's feed files a decode token's fresh slot and its write as one ALLOCATED event
    j = SlotJournal(block_size=1)
    j.record(1, JournalKind.ALLOCATED, [5], A, first_position=3, last_position=3)
    j.record(4, JournalKind.ALLOCATED, [5], B, first_position=0, last_position=0)
    j.record(6, JournalKind.ALLOCATED, [6], B)  # no positions: an allocation only
    (first, second) = j.history(5)
    assert first.wrote and second.wrote and not j.history(6)[0].wrote
    att = attribute([_row(RECORD)], j.history(5), step=5, slot=5)
    assert att.bug_class is BugClass.DOUBLE_ALLOCATION and att.anomaly_step == 4
    assert (att.writer, att.write_step, att.written_positions) == ("request:b", 4, (0, 0))
    assert att.holders == ("request:a",)
    att = attribute([_row(RECORD, slot=6)], j.history(6), step=7, slot=6)
    assert att.writer is None and att.written_positions is None


def test_a_free_under_the_cache_then_a_reallocation_is_a_use_after_free() -> None:
    j = SlotJournal(block_size=1)
    j.record(1, JournalKind.ALLOCATED, [5], A)
    j.record(2, JournalKind.CACHED, [5], CACHE)
    j.record(3, JournalKind.FREED, [5])
    j.record(3, JournalKind.RELEASED, [5], A)
    j.record(4, JournalKind.ALLOCATED, [5], B)
    j.record(4, JournalKind.WRITTEN, [5], B, first_position=0, last_position=0)
    att = attribute([_row(RECORD)], j.history(5), step=6, slot=5)
    assert att.bug_class is BugClass.USE_AFTER_FREE
    assert att.writer == "request:b" and "cache:tree" in att.holders
    assert claimants_at(j.history(5), 4) == [CACHE, B]


def test_an_eviction_releases_the_cache_first_so_reuse_is_clean() -> None:
    j = SlotJournal(block_size=1)
    j.record(1, JournalKind.ALLOCATED, [5], A)
    j.record(2, JournalKind.CACHED, [5], CACHE)
    j.record(3, JournalKind.RELEASED, [5], A)
    j.record(5, JournalKind.RELEASED, [5], CACHE)
    j.record(5, JournalKind.FREED, [5])
    j.record(6, JournalKind.ALLOCATED, [5], B)
    assert first_anomaly(j.history(5)) is None


def test_a_write_into_a_block_the_writer_does_not_hold_is_a_wrong_cache_location() -> None:
    j = SlotJournal(block_size=1)
    j.record(1, JournalKind.ALLOCATED, [5], A)
    j.record(2, JournalKind.WRITTEN, [5], B, first_position=8, last_position=8)
    att = attribute([_row(RECORD)], j.history(5), step=3, slot=5, writer_slot_at={"b": {8: 11}})
    assert att.bug_class is BugClass.WRONG_CACHE_LOCATION
    assert att.writer == "request:b" and att.holders == ("request:a",)
    assert att.intended_slot == 11 and att.actual_slot == 5


def test_a_double_free_is_a_double_allocation() -> None:
    j = SlotJournal(block_size=1)
    j.record(1, JournalKind.ALLOCATED, [5], A)
    j.record(2, JournalKind.FREED, [5])
    j.record(2, JournalKind.FREED, [5])
    anomaly = first_anomaly(j.history(5))
    assert anomaly is not None and anomaly.bug_class is BugClass.DOUBLE_ALLOCATION


def test_rows_alone_classify_when_ownership_is_clean() -> None:
    j = SlotJournal(block_size=1)
    j.record(1, JournalKind.ALLOCATED, [5], A)
    h = j.history(5)
    assert attribute([_row(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)], h, step=2, slot=5).bug_class \
        is BugClass.BYTE_CORRUPTION
    assert attribute([_row(FailReason.WRITE_POSITION_MISMATCH)], h, step=2, slot=5).bug_class \
        is BugClass.POSITION_ERROR
    assert attribute([_row(FailReason.ZERO_SLOT_IN_LIVE_RANGE)], h, step=2, slot=5).bug_class \
        is BugClass.STALE_TRANSLATION
    assert attribute([_row(RECORD, tag=CanaryLaunchTag.SWEEP_K_SWA)], h, step=2, slot=5, swa=True).bug_class \
        is BugClass.STALE_TRANSLATION
    assert attribute([_row(FailReason(0))], h, step=2, slot=5).bug_class is BugClass.UNKNOWN


def test_an_ownership_anomaly_after_the_violation_is_not_its_cause() -> None:
    j = SlotJournal(block_size=1)
    j.record(1, JournalKind.ALLOCATED, [5], A)
    j.record(9, JournalKind.ALLOCATED, [5], B)
    att = attribute([_row(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)], j.history(5), step=3, slot=5)
    assert att.bug_class is BugClass.BYTE_CORRUPTION


def test_a_truncated_window_that_shows_no_anomaly_does_not_vouch_for_clean_ownership() -> None:
    """The cache held the block, it was freed under it and handed to b, and then so many writes came that the
    free is older than the window: the window cannot show the use after free, and the answer says so."""
    j, whole = SlotJournal(block_size=1, per_block=4), SlotJournal(block_size=1)  # whole: every event kept
    for journal in (j, whole):
        journal.record(1, JournalKind.ALLOCATED, [5], A, first_position=3, last_position=3)
        journal.record(1, JournalKind.CACHED, [5], CACHE)
        journal.record(2, JournalKind.RELEASED, [5], A)
        journal.record(2, JournalKind.FREED, [5])
        journal.record(3, JournalKind.ALLOCATED, [5], B, first_position=0, last_position=0)
        for step in range(4, 9):
            journal.record(step, JournalKind.WRITTEN, [5], B, first_position=0, last_position=0)
    assert whole.per_block >= 10 and not any(e.carried for e in whole.history(5))
    assert attribute([_row(RECORD)], whole.history(5), step=9, slot=5).bug_class is BugClass.USE_AFTER_FREE
    history = j.history(5)
    assert [(e.kind, e.owner) for e in history if e.carried] == [(JournalKind.SHARED, B)]  # b held it then
    att = attribute([_row(RECORD)], history, step=9, slot=5)
    assert att.bug_class is BugClass.STALE_TRANSLATION and att.anomaly_step is None  # not wrong cache location
    assert "not vouched for" in att.reason and "ownership is clean" not in att.reason, att.reason
    assert any("journal window is truncated" in n for n in att.notes), att.notes


def test_rows_that_prove_their_class_keep_their_reason_in_a_truncated_window() -> None:
    j = SlotJournal(block_size=1, per_block=1)
    j.record(1, JournalKind.ALLOCATED, [5], A, first_position=3, last_position=3)
    j.record(2, JournalKind.WRITTEN, [5], A, first_position=3, last_position=3)
    att = attribute([_row(FailReason.WRITE_POSITION_MISMATCH)], j.history(5), step=3, slot=5)
    assert att.bug_class is BugClass.POSITION_ERROR and "not vouched" not in att.reason
    assert att.notes and "truncated" in att.notes[0]

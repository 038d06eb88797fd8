"""Ownership attribution: who wrote a violated slot, who else held it then, and the most likely bug class.

Everything here is a function of the slot's journal history (:meth:`SlotJournal.history`), the violation
rows and, when the engine can describe its requests, the writer's block table. A history that is only the
block's newest events starts with its ``carried`` holders (who held the block when the window opens): they
count as holders, and no answer that rests on clean ownership is given without saying the window is
truncated (an anomaly before it, a free under a cache entry, cannot be ruled out). The classes are the ways
engines have corrupted their KV cache:

- double allocation: the block was handed out while a live request still held it, or freed twice;
- use after free: the block was freed while the prefix cache still held it, then handed out again;
- wrong cache location: a request wrote a block it does not hold (its table names another slot there), or
  the write-slot extension check caught the write;
- stale translation: the slot mapping the check read (a table row, a sliding-window translation, a zero
  entry) named the wrong slot while the block's ownership is clean;
- position error: a write stamped a position that does not follow its predecessor's;
- byte corruption: the record is intact but the KV bytes it fingerprints changed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kvcanary.consts import FailReason
from kvcanary.guard.journal import JournalEvent, JournalKind, Owner, OwnerKind
from kvcanary.violations import Violation


class BugClass(str, Enum):
    """The most likely cause of a violation, as a report names it."""

    DOUBLE_ALLOCATION = "double_allocation"
    USE_AFTER_FREE = "use_after_free"
    WRONG_CACHE_LOCATION = "wrong_cache_location"
    STALE_TRANSLATION = "stale_translation"
    POSITION_ERROR = "position_error"
    BYTE_CORRUPTION = "byte_corruption"
    UNKNOWN = "unknown"

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")


_ADDS = (JournalKind.ALLOCATED, JournalKind.SHARED, JournalKind.CACHED)
_RECORD_BITS = (FailReason.VERIFY_CHAIN_HASH_MISMATCH | FailReason.VERIFY_POSITION_MISMATCH
                | FailReason.VERIFY_TOKEN_MISMATCH)


@dataclass(frozen=True)
class Attribution:
    """Who owned the slot when it was corrupted, and what most likely happened.

    ``writer``: the owner of the last write into the block before the violation was recorded (step
    ``write_step``); ``holders``: every other owner that held the block then, counting one whose block was
    freed under it (a stale holder is what a use after free leaves); ``intended_slot``: for a misdirected
    write, the slot the writer's own table names for the written position (the row's slot is the actual one).
    """

    bug_class: BugClass
    reason: str
    writer: str | None = None
    write_step: int | None = None
    written_positions: tuple[int, int] | None = None
    holders: tuple[str, ...] = ()
    intended_slot: int | None = None
    actual_slot: int | None = None
    anomaly_step: int | None = None
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {"bug_class": self.bug_class.value, "reason": self.reason, "writer": self.writer,
                "write_step": self.write_step,
                "written_positions": list(self.written_positions) if self.written_positions else None,
                "holders": list(self.holders), "intended_slot": self.intended_slot,
                "actual_slot": self.actual_slot, "anomaly_step": self.anomaly_step, "notes": list(self.notes)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Attribution:
        wp = d.get("written_positions")
        return cls(BugClass(d["bug_class"]), str(d["reason"]), d.get("writer"), d.get("write_step"),
                   (int(wp[0]), int(wp[1])) if wp else None, tuple(d.get("holders", ())), d.get("intended_slot"),
                   d.get("actual_slot"), d.get("anomaly_step"), tuple(d.get("notes", ())))


def claimants_at(history: Sequence[JournalEvent], step: int) -> list[Owner]:
    """Owners that claimed the block at ``step``: added at or before it and not released before it. Unlike
    :meth:`SlotJournal.owners_at`, a free does not clear the claims: an owner whose block was freed under it
    still holds a stale claim, which is how a use after free shows."""
    held: dict[Owner, None] = {}
    for e in history:
        if e.step > step:
            break
        if e.kind in _ADDS and e.owner is not None:
            held[e.owner] = None
        elif e.kind is JournalKind.RELEASED and e.owner is not None and e.step < step:
            held.pop(e.owner, None)
    return list(held)


@dataclass(frozen=True)
class Anomaly:
    """The first ownership anomaly in a block's history."""

    bug_class: BugClass
    step: int
    reason: str
    owners: tuple[Owner, ...]


def first_anomaly(history: Sequence[JournalEvent]) -> Anomaly | None:
    """Scan the history in order for the first event that a correct engine never produces."""
    live: dict[Owner, None] = {}  # holders since the last free
    stale_cache: list[Owner] = []  # cache entries whose block was freed under them
    freed = False
    for e in history:
        o = e.owner
        if e.kind is JournalKind.ALLOCATED and o is not None:
            others = [h for h in live if h.kind is OwnerKind.REQUEST]
            if others:
                return Anomaly(BugClass.DOUBLE_ALLOCATION, e.step,
                               f"block {e.block} allocated to {o} at step {e.step} while "
                               f"{', '.join(map(str, others))} still held it", (*others, o))
            if stale_cache:
                return Anomaly(BugClass.USE_AFTER_FREE, e.step,
                               f"block {e.block} was freed while {', '.join(map(str, stale_cache))} still held it, "
                               f"then allocated to {o} at step {e.step}", (*stale_cache, o))
            live[o] = None
            freed = False
        elif e.kind in (JournalKind.SHARED, JournalKind.CACHED) and o is not None:
            live[o] = None
            freed = False
        elif e.kind is JournalKind.RELEASED and o is not None:
            live.pop(o, None)
        elif e.kind is JournalKind.FREED:
            if freed and not live:
                return Anomaly(BugClass.DOUBLE_ALLOCATION, e.step,
                               f"block {e.block} freed twice (step {e.step}) without an allocation between: "
                               "the free list now hands it out twice", ())
            stale_cache = [h for h in live if h.kind is OwnerKind.CACHE]
            live.clear()
            freed = True
        elif e.kind is JournalKind.WRITTEN and o is not None and o not in live and o.kind is OwnerKind.REQUEST:
            holders = tuple(live)
            return Anomaly(BugClass.WRONG_CACHE_LOCATION, e.step,
                           f"{o} wrote positions [{e.first_position}, {e.last_position}] into block {e.block} at step "
                           f"{e.step} without holding it"
                           + (f" (held by {', '.join(map(str, holders))})" if holders else ""), (*holders, o))
    return None


def last_write(history: Sequence[JournalEvent], step: int) -> JournalEvent | None:
    """The last write at or before ``step``: a WRITTEN event, or an ALLOCATED one that carries the positions
    its owner wrote (:attr:`JournalEvent.wrote`)."""
    out = None
    for e in history:
        if e.step > step:
            break
        if e.wrote:
            out = e
    return out


def _row_class(rows: Sequence[Violation], swa: bool) -> tuple[BugClass, str] | None:
    """What the rows alone say, for the patterns no journal is needed for."""
    bits = 0
    for v in rows:
        bits |= v.fail_reason_bits
    if bits & FailReason.WRITE_SLOT_MISMATCH:
        return BugClass.WRONG_CACHE_LOCATION, "the write-slot check saw a write to a slot its table does not name"
    if bits & FailReason.WRITE_POSITION_MISMATCH:
        return BugClass.POSITION_ERROR, "a write stamped a position that does not follow its predecessor's"
    if bits & FailReason.ZERO_SLOT_IN_LIVE_RANGE:
        return BugClass.STALE_TRANSLATION, "the table named the padding slot 0 inside a live range"
    if swa:
        return BugClass.STALE_TRANSLATION, ("the sliding-window group's record is wrong while the full slot's "
                                           "ownership is clean: a stale full-to-window translation")
    if bits & FailReason.VERIFY_REAL_KV_HASH_MISMATCH and not bits & _RECORD_BITS:
        return BugClass.BYTE_CORRUPTION, "the record is intact but the KV bytes it fingerprints changed"
    return None


_BY_ROWS_ALONE = (BugClass.WRONG_CACHE_LOCATION, BugClass.POSITION_ERROR, BugClass.STALE_TRANSLATION)
"""The classes the rows alone prove (write-slot, chain-position and zero-slot rows), before any journal."""


def _only_misdirected(cls: BugClass, intended: int | None) -> int | None:
    return intended if cls is BugClass.WRONG_CACHE_LOCATION else None


def truncation_note(history: Sequence[JournalEvent]) -> str | None:
    """What an attribution from ``history`` must say when the history is a truncated window (it starts with
    carried events), else None."""
    carried = [e for e in history if e.carried]
    if not carried:
        return None
    start = next((e.step for e in history if not e.carried), None)
    since = f"from step {start}" if start is not None else "none of them"
    return (f"the journal window is truncated (the block's newest events only, {since}; who held it when the "
            "window opens is carried): an ownership anomaly before the window cannot be ruled out")


def attribute(rows: Sequence[Violation], history: Sequence[JournalEvent], *, step: int, slot: int,
              swa: bool = False, writer_slot_at: dict[str, dict[int, int]] | None = None,
              block_size: int = 1) -> Attribution:
    """Attribute the violation ``rows`` of ``slot`` (recorded during ``step``) from its block's ``history``.

    ``writer_slot_at``: per request id, position -> slot of its table (from the engine's description), used
    to name the intended slot of a misdirected write (reported for a wrong cache location only: the writer's
    table names a slot of another block for a position it wrote into this one; ``block_size`` is the
    journal's). ``swa``: the rows are the sliding-window group's. A truncated ``history`` (carried events
    first): an answer that found no anomaly says it cannot vouch for clean ownership (its reason and notes)."""
    att = _attribute(rows, history, step=step, slot=slot, swa=swa, writer_slot_at=writer_slot_at,
                     block_size=block_size)
    note = truncation_note(history)
    if note is None or att.anomaly_step is not None:
        return att
    fixed = _row_class(rows, False)
    if fixed is not None and fixed[0] in _BY_ROWS_ALONE:  # the rows prove the class: no ownership claim
        return dataclasses.replace(att, notes=(*att.notes, note))
    reason = att.reason.replace("ownership is clean", "ownership looks clean in the journal's window")
    return dataclasses.replace(att, reason=f"{reason} (not vouched for: the journal window is truncated)",
                               notes=(*att.notes, note))


def _attribute(rows: Sequence[Violation], history: Sequence[JournalEvent], *, step: int, slot: int,
               swa: bool, writer_slot_at: dict[str, dict[int, int]] | None, block_size: int) -> Attribution:
    """:func:`attribute` before the truncation note."""
    write = last_write(history, step)
    writer = write.owner if write is not None else None
    held = claimants_at(history, write.step if write is not None else step)
    holders = tuple(str(h) for h in held if h != writer)
    wpos = (write.first_position, write.last_position) if write is not None and write.first_position is not None \
        and write.last_position is not None else None
    intended = None
    if writer is not None and wpos is not None and writer_slot_at is not None:
        table = writer_slot_at.get(writer.id, {})
        for p in range(wpos[0], wpos[1] + 1):
            s = table.get(p)
            if s is not None and s >= 0 and s // block_size != slot // block_size:  # its table names another block
                intended = s
                break
    base: dict[str, Any] = {"writer": str(writer) if writer else None, "write_step": write.step if write else None,
                            "written_positions": wpos, "holders": holders, "actual_slot": slot}
    fixed = _row_class(rows, False)
    if fixed is not None and fixed[0] in _BY_ROWS_ALONE:
        return Attribution(fixed[0], fixed[1], intended_slot=_only_misdirected(fixed[0], intended), **base)
    anomaly = first_anomaly(history)
    if anomaly is not None and anomaly.step <= step:
        names = tuple(str(o) for o in anomaly.owners)
        all_holders = tuple(dict.fromkeys(holders + tuple(n for n in names if n != base["writer"])))
        base["holders"] = all_holders
        return Attribution(anomaly.bug_class, anomaly.reason, anomaly_step=anomaly.step,
                           intended_slot=_only_misdirected(anomaly.bug_class, intended), **base)
    by_rows = _row_class(rows, swa)
    if by_rows is not None:
        return Attribution(by_rows[0], by_rows[1], intended_slot=_only_misdirected(by_rows[0], intended), **base)
    bits = 0
    for v in rows:
        bits |= v.fail_reason_bits
    if bits & FailReason.VERIFY_TOKEN_MISMATCH and not bits & FailReason.VERIFY_CHAIN_HASH_MISMATCH:
        return Attribution(BugClass.STALE_TRANSLATION, "the stored chain is intact but belongs to another "
                           "request's tokens: the reader's table row named another request's slots", **base)
    if bits & _RECORD_BITS:
        return Attribution(BugClass.STALE_TRANSLATION, "the record was rewritten but the block's ownership is "
                           "clean: the reader's slot mapping named a slot it does not own", **base)
    return Attribution(BugClass.UNKNOWN, "no known pattern matches the rows and the journal", **base)

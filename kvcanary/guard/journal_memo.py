"""The slot journal's per-block memo: a busy block's state after its newest event, so a read replays only
what came after.

A block a shared prefix keeps busy has a quarter of a full ring's events (about 2**18): replaying them on
every :meth:`~kvcanary.guard.journal.SlotJournal.holders` call (the owner map makes one per released block)
cost tens of ms each. A :class:`Memo` keeps what the last full answer found (the newest seq it covered, that
event's step, the holders with their join steps in join order, the quarantine flag); the next read replays the
block's events after that seq only, by the same rules as the base's fold (:mod:`kvcanary.guard.journal_base`).
Only blocks whose replay walked at least :data:`MEMO_MIN` events get one (a short chain is cheap to replay),
and a memo whose seq left the ring is dropped (base plus an empty chain answers the same).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcanary.guard.journal_events import apply_events
from kvcanary.guard.journal_ring import EventRing

MEMO_MIN = 32
"""Events a replay walks before its block gets a memo."""


@dataclass(slots=True)
class Memo:
    """A block's state after its event ``seq`` (the step of that event: ``step``)."""

    seq: int
    step: int
    held: dict[int, int]
    """Owner code -> join step, in join order."""
    quarantined: bool


def replay(ring: EventRing, chain: list[int], held: dict[int, int], quarantined: bool) -> bool:
    """Apply the ring events at indices ``chain`` (oldest first) to ``held`` (in place); returns the
    quarantine flag after them."""
    return apply_events(ring.kind_mv, ring.owner_mv, ring.step_mv, chain, held, quarantined)


def prune(memos: dict[int, Memo], oldest: int) -> None:
    """Drop the memos whose newest event left the ring (seq below ``oldest``): the base holds their state."""
    for b in [b for b, m in memos.items() if m.seq < oldest]:
        del memos[b]

"""The slot journal: a bounded, host-side record of who held each KV block, and when.

The engine adapter (or the manager, from what it already maps each step) records ownership changes per
block: allocated to a request, written at positions, shared with another request, kept by the prefix
cache, freed, quarantined, released from quarantine. The cost is one entry per change, never one per
token. :meth:`SlotJournal.owners_at` answers "who held this slot at step S", which is what isolation needs
for a violation read back steps after the corrupting one, and what evidence bundles show.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple


class OwnerKind(str, Enum):
    """What holds a block: a live request, or the prefix cache (a cached, shared prefix)."""

    REQUEST = "request"
    CACHE = "cache"


@dataclass(frozen=True, slots=True)
class Owner:
    """One holder of a block: an engine request id, or a prefix-cache entry's id."""

    kind: OwnerKind
    id: str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.id}"


class JournalKind(str, Enum):
    """One ownership change of a block."""

    ALLOCATED = "allocated"  # handed to ``owner`` (a fresh block); with positions: and written by it there
    SHARED = "shared"  # ``owner`` holds it too (a prefix hit, a fork)
    WRITTEN = "written"  # ``owner`` wrote positions ``[first_position, last_position]`` into it
    CACHED = "cached"  # the prefix cache keeps it (``owner`` is the cache entry)
    RELEASED = "released"  # ``owner`` no longer holds it (finished, preempted, evicted from the cache)
    FREED = "freed"  # back on the free list: nobody holds it
    QUARANTINED = "quarantined"  # taken out of service after a violation
    REINSTATED = "reinstated"  # back in service (its records were rewritten)


_ADDS = (JournalKind.ALLOCATED, JournalKind.SHARED, JournalKind.CACHED, JournalKind.WRITTEN)
"""Kinds that make ``owner`` a holder of the block (a writer holds what it writes)."""


class JournalEvent(NamedTuple):
    """One entry: at ``step``, ``kind`` happened to ``block`` (for ``owner``, where one is named)."""

    step: int
    kind: JournalKind
    block: int
    owner: Owner | None = None
    first_position: int | None = None
    last_position: int | None = None

    @property
    def wrote(self) -> bool:
        """Whether the event is a write: WRITTEN, or an ALLOCATED that carries the positions its owner wrote
        into the block in the same step (a feed that files the allocation and the first write as one)."""
        return self.kind is JournalKind.WRITTEN or (self.kind is JournalKind.ALLOCATED
                                                    and self.first_position is not None)


_Entry = tuple[int, JournalKind, int, Owner | None, int | None, int | None]
"""How an event is kept: a plain tuple of :class:`JournalEvent`'s fields (built on the engine's step, so it
must be as cheap as a tuple can be; the named view is made only when the events are read)."""

_as_event = tuple.__new__
"""Views a kept entry as a :class:`JournalEvent` (no field parsing)."""

JournalObserver = Callable[[int, JournalKind, list[int], Owner | None], None]
"""Called with ``(step, kind, blocks, owner)`` after each :meth:`SlotJournal.record` (the owner map)."""


class SlotJournal:
    """Ownership events per block, at most ``per_block`` kept per block (oldest dropped first) and at most
    ``max_blocks`` blocks tracked (the least recently changed forgotten first, an eighth of them at a time),
    so memory is bounded.

    Recording costs one tuple and one append per event: :meth:`record` files one kind for a list of blocks
    and one owner, :meth:`record_each` a whole step's events of one kind, each with its own block, owner and
    positions, in one call (an engine's feed calls it once per step, not once per request).

    It also keeps when each request finished (:meth:`finish`, at most ``max_finished`` of them, oldest
    forgotten first): a request that read a slot and finished before the violation was read back cannot be
    failed any more, only reported."""

    def __init__(self, *, block_size: int, per_block: int = 64, max_blocks: int = 1 << 16,
                 max_finished: int = 1 << 14) -> None:
        from kvcanary.constructors.journal import check_slot_journal  # the rules, with their codes (KVC-X)

        check_slot_journal(block_size=block_size, per_block=per_block, max_blocks=max_blocks,
                           max_finished=max_finished)
        self.block_size = block_size
        self.per_block = per_block
        self.max_blocks = max_blocks
        self.max_finished = max_finished
        self._events: dict[int, list[_Entry]] = {}
        self._finished: dict[str, int] = {}
        self.recorded = 0
        """Events recorded since creation (dropped ones included)."""
        self._observers: list[JournalObserver] = []

    def add_observer(self, observer: JournalObserver) -> None:
        """Call ``observer(step, kind, blocks, owner)`` after every :meth:`record` that names a block."""
        self._observers.append(observer)

    def block_of(self, slot: int) -> int:
        return slot // self.block_size

    def _new_block(self, block: int) -> list[_Entry]:
        """A fresh ring for ``block``; when ``max_blocks`` are tracked, the least recently changed eighth
        (by their newest event's step; insertion order among equals) is forgotten first."""
        table = self._events
        if len(table) >= self.max_blocks:
            drop = max(1, self.max_blocks // 8)
            for b in sorted(table, key=lambda b: table[b][-1][0] if table[b] else -1)[:drop]:
                del table[b]
        events: list[_Entry] = []  # a list, not a bounded deque: a deque's first block is a 0.5 kB allocation
        table[block] = events
        return events

    def record(self, step: int, kind: JournalKind, blocks: Iterable[int], owner: Owner | None = None, *,
               first_position: int | None = None, last_position: int | None = None) -> None:
        """Record ``kind`` for each of ``blocks`` at ``step``."""
        named = [int(b) for b in blocks]
        if not named:
            return
        get = self._events.get
        per = self.per_block
        for block in named:
            events = get(block)
            if events is None:
                events = self._new_block(block)
            elif len(events) >= per:
                del events[0]
            events.append((step, kind, block, owner, first_position, last_position))
        self.recorded += len(named)
        for observe in self._observers:
            observe(step, kind, named, owner)

    def record_each(self, step: int, kind: JournalKind, blocks: Sequence[int], owners: Sequence[Owner | None],
                    firsts: Sequence[int | None] | None = None, lasts: Sequence[int | None] | None = None) -> None:
        """Record one ``kind`` event per entry at ``step``: ``blocks[i]`` for ``owners[i]``, positions
        ``firsts[i]..lasts[i]`` where given (a step's writes, one per request and block written). The
        sequences run in parallel; blocks are ints already (the caller's own lists, not tensors)."""
        n = len(blocks)
        if len(owners) != n or (firsts is not None and len(firsts) != n) or (lasts is not None and len(lasts) != n):
            raise ValueError(f"record_each: blocks, owners, firsts and lasts must be as long as each other "
                             f"(blocks has {n})")
        if not n:
            return
        none: list[int | None] = [None] * n
        table = self._events
        get = table.get
        per, most = self.per_block, self.max_blocks
        for block, owner, first, last in zip(blocks, owners, none if firsts is None else firsts,
                                             none if lasts is None else lasts, strict=True):
            events = get(block)
            if events is None:  # a new block (inline: in a token-major pool most writes start one)
                if len(table) >= most:
                    self._new_block(block).append((step, kind, block, owner, first, last))
                else:
                    table[block] = [(step, kind, block, owner, first, last)]
                continue
            if len(events) >= per:
                del events[0]
            events.append((step, kind, block, owner, first, last))
        self.recorded += n
        if self._observers:  # one call per run of entries with the same owner
            at = 0
            for i in range(1, n + 1):
                if i == n or owners[i] != owners[at]:
                    for observe in self._observers:
                        observe(step, kind, list(blocks[at:i]), owners[at])
                    at = i

    def finish(self, request_id: str, step: int) -> None:
        """``request_id`` finished (its output was returned) at ``step``."""
        self._finished.pop(request_id, None)
        if len(self._finished) >= self.max_finished:
            del self._finished[next(iter(self._finished))]
        self._finished[request_id] = step

    def finished_step(self, request_id: str) -> int | None:
        """The step ``request_id`` finished at, None while it has not (or was forgotten)."""
        return self._finished.get(request_id)

    def history(self, slot: int) -> list[JournalEvent]:
        """The events kept for ``slot``'s block, oldest first."""
        return [_as_event(JournalEvent, e) for e in self._events.get(self.block_of(slot), ())]

    def owners_at(self, slot: int, step: int) -> list[Owner]:
        """Who held ``slot``'s block during ``step``: every owner added at or before ``step`` and not released
        before it (one released or freed during ``step`` still held it during that step)."""
        return self.owners_between(slot, step, step)

    def owners_between(self, slot: int, first_step: int, last_step: int) -> list[Owner]:
        """Who held ``slot``'s block during any step of ``[first_step, last_step]``, in the order they
        took it: what a violation recorded at ``first_step`` and read back at ``last_step`` must isolate
        (a request that took a corrupt block after the corruption read it too)."""
        held: dict[Owner, None] = {}
        out: dict[Owner, None] = {}
        for e in self.history(slot):
            if e.step > last_step:
                break
            if e.step >= first_step:
                out.update(held)  # everything still held when the window opens was held in it
            if e.kind in _ADDS and e.owner is not None:
                held[e.owner] = None
                if e.step >= first_step:
                    out[e.owner] = None
            elif e.step < first_step and e.kind is JournalKind.RELEASED and e.owner is not None:
                held.pop(e.owner, None)
            elif e.step < first_step and e.kind is JournalKind.FREED:
                held.clear()
        out.update(held)
        return list(out)

    def holders(self, slot: int) -> list[Owner]:
        """Who holds ``slot``'s block after every event kept for it (added and not released or freed since)."""
        held: dict[Owner, None] = {}
        for e in self.history(slot):
            if e.kind in _ADDS and e.owner is not None:
                held[e.owner] = None
            elif e.kind is JournalKind.RELEASED and e.owner is not None:
                held.pop(e.owner, None)
            elif e.kind is JournalKind.FREED:
                held.clear()
        return list(held)

    def quarantined(self, slot: int) -> bool:
        """Whether ``slot``'s block is quarantined now (its last quarantine is not followed by a reinstate)."""
        for e in reversed(self.history(slot)):
            if e.kind is JournalKind.QUARANTINED:
                return True
            if e.kind is JournalKind.REINSTATED:
                return False
        return False

"""The slot journal's answers as defined before the columnar rewrite: :class:`ReferenceJournal`.

A plain copy of ``SlotJournal`` as it was (one tuple per event in a list per block), kept as the definition
the tests hold the real one to (``test_journal_differential.py``). Only the vocabulary (owners, kinds,
events, observers) is imported from the package: the bookkeeping and every answer are copied, so a change to
the real journal cannot change what it is compared against. Its constructor checks nothing (the tests pass
bounds that never bind). One rule was added since: a request id that takes a block again (an ADD kind with
its request owner) is a new request, whose predecessor's finish and end are forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kvcanary.guard.journal import JournalEvent, JournalKind, JournalObserver, Owner, OwnerKind

_ADDS = (JournalKind.ALLOCATED, JournalKind.SHARED, JournalKind.CACHED, JournalKind.WRITTEN)
"""Kinds that make ``owner`` a holder of the block (a writer holds what it writes)."""

_Entry = tuple[int, JournalKind, int, Owner | None, int | None, int | None]
"""How an event is kept: a plain tuple of :class:`JournalEvent`'s fields."""

_as_event = tuple.__new__
"""Views a kept entry as a :class:`JournalEvent` (no field parsing)."""


class ReferenceJournal:
    """Ownership events per block, at most ``per_block`` kept per block (oldest dropped first) and at most
    ``max_blocks`` blocks tracked (the least recently changed forgotten first, an eighth of them at a time);
    the finishing step of at most ``max_finished`` requests (oldest forgotten first)."""

    def __init__(self, *, block_size: int, per_block: int = 64, max_blocks: int = 1 << 16,
                 max_finished: int = 1 << 14) -> None:
        self.block_size = block_size
        self.per_block = per_block
        self.max_blocks = max_blocks
        self.max_finished = max_finished
        self._events: dict[int, list[_Entry]] = {}
        self._finished: dict[str, int] = {}
        self._ended: dict[str, None] = {}
        self.recorded = 0
        """Events recorded since creation (dropped ones included)."""
        self._observers: list[JournalObserver] = []

    def add_observer(self, observer: JournalObserver) -> None:
        """Call ``observer(step, kind, blocks, owner)`` after every :meth:`record` that names a block."""
        self._observers.append(observer)

    def block_of(self, slot: int) -> int:
        return slot // self.block_size

    def _new_block(self, block: int) -> list[_Entry]:
        """A fresh list for ``block``; when ``max_blocks`` are tracked, the least recently changed eighth
        (by their newest event's step; insertion order among equals) is forgotten first."""
        table = self._events
        if len(table) >= self.max_blocks:
            drop = max(1, self.max_blocks // 8)
            for b in sorted(table, key=lambda b: table[b][-1][0] if table[b] else -1)[:drop]:
                del table[b]
        events: list[_Entry] = []
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
        self._took(kind, owner)
        for observe in self._observers:
            observe(step, kind, named, owner)

    def record_each(self, step: int, kind: JournalKind, blocks: Sequence[int], owners: Sequence[Owner | None],
                    firsts: Sequence[int | None] | None = None, lasts: Sequence[int | None] | None = None) -> None:
        """Record one ``kind`` event per entry at ``step``: ``blocks[i]`` for ``owners[i]``, positions
        ``firsts[i]..lasts[i]`` where given."""
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
            if events is None:
                if len(table) >= most:
                    self._new_block(block).append((step, kind, block, owner, first, last))
                else:
                    table[block] = [(step, kind, block, owner, first, last)]
                continue
            if len(events) >= per:
                del events[0]
            events.append((step, kind, block, owner, first, last))
        for owner in owners:
            self._took(kind, owner)
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

    def end(self, request_id: str) -> None:
        """``request_id`` ended unfinished (failed)."""
        self._ended.pop(request_id, None)
        if len(self._ended) >= self.max_finished:
            del self._ended[next(iter(self._ended))]
        self._ended[request_id] = None

    def ended(self, request_id: str) -> bool:
        """Whether ``request_id`` ended and took no block since."""
        return request_id in self._ended

    def _took(self, kind: JournalKind, owner: Owner | None) -> None:
        """An ADD kind of a request owner: a new request with its id (its predecessor's finish and end forgotten)."""
        if kind in _ADDS and owner is not None and owner.kind is OwnerKind.REQUEST:
            self._finished.pop(owner.id, None)
            self._ended.pop(owner.id, None)

    def history(self, slot: int) -> list[JournalEvent]:
        """The events kept for ``slot``'s block, oldest first."""
        return [_as_event(JournalEvent, (*e, False)) for e in self._events.get(self.block_of(slot), ())]

    def owners_at(self, slot: int, step: int) -> list[Owner]:
        """Who held ``slot``'s block during ``step``: every owner added at or before ``step`` and not released
        before it (one released or freed during ``step`` still held it during that step)."""
        return self.owners_between(slot, step, step)

    def owners_between(self, slot: int, first_step: int, last_step: int) -> list[Owner]:
        """Who held ``slot``'s block during any step of ``[first_step, last_step]``, in the order they
        took it."""
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

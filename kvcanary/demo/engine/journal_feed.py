"""The demo engine's ownership changes, fed to its canary managers' slot journals.

:class:`JournalFeed` wraps the engine's request table, KV memory, radix cache and forward builder on the
instance (the engine's code is unchanged): a slot handed to a request (``reserve``, a PD transfer) is
ALLOCATED, a prefix hit SHARED, a radix insert CACHED, a radix eviction RELEASED by the cache, every return
to the free list FREED, a request leaving RELEASED; an SWA slot's return to the SWA free list is FREED in the
SWA journal.

Writes are recorded per block entered, never per token (:func:`forward_events`). A reservation is filed at
the forward after it (or before any other event, which must not overtake it): one ALLOCATED event per slot,
carrying the positions its request writes there in that forward, else the positions the reservation gives
the slot (so the allocation and the write are one event). A write into a block the request was handed
earlier in the step, or wrote in the engine's previous forward, adds nothing (a draft or verify pass over the
step's slots, a rewrite); any other write is a WRITTEN event with its positions (a misdirected write, a draft
past its allocation). The demo pool has one slot per block and hands each decode token a fresh slot, so a
decode row is one ALLOCATED event per step (its ownership change, the write folded in), a prefill chunk one
per slot. A forward whose rows write exactly the slots just reserved for them, in order (every decode and
prefill forward of a correct engine), takes a path with no per-row Python loop: the events are made with
``map`` over the rows and filed in one :meth:`~kvcanary.guard.SlotJournal.record_each` call per journal.

The journals are the managers' own (:attr:`CanaryManager.journal`, read at each event, so a journal the
manager replaces is followed): the evidence bundles read them, and the write-time owner check's map frees
and locks slots from their events (FREED, RELEASED, QUARANTINED, REINSTATED: none of them is deferred).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain, repeat
from operator import attrgetter
from time import perf_counter
from typing import TYPE_CHECKING, Any

from kvcanary.demo.engine.requests import Request
from kvcanary.guard.journal import JournalKind, Owner, OwnerKind, SlotJournal

if TYPE_CHECKING:
    from kvcanary.demo.engine.engine import Engine

CACHE_OWNER = Owner(OwnerKind.CACHE, "radix")

_MAX_OWNERS = 1 << 16


class _Owners(dict[int, Owner]):
    """Request id -> its journal owner, made once (a frozen dataclass is slow to build on every step); bounded:
    cleared when it grows past ``_MAX_OWNERS`` (it is only a cache). Indexing makes a missing one."""

    def __missing__(self, rid: int) -> Owner:
        if len(self) >= _MAX_OWNERS:
            self.clear()
        owner = self[rid] = Owner(OwnerKind.REQUEST, str(rid))
        return owner


_OWNERS = _Owners()
_owner_of = _OWNERS.__getitem__
_REQ = attrgetter("req")
_RID = attrgetter("rid")
_LOCS = attrgetter("locs")
_POSITIONS = attrgetter("positions")


def _req(r: Request) -> Owner:
    return _owner_of(r.rid)


Entries = tuple[list[int], list[Owner | None], list[int | None], list[int | None]]
"""Parallel lists of journal entries: blocks, owners, first and last positions."""


def _runs(row: Any, block_size: int) -> list[tuple[int, int, int]]:
    """``row``'s writes as (block, first, last position) runs: cut where the block changes, the positions
    jump or slot 0 (padding) comes; slots <= 0 are left out."""
    out: list[tuple[int, int, int]] = []
    run, last = -1, -2
    for pos, loc in zip(row.positions, row.locs, strict=True):
        if loc <= 0:
            run = -1
            continue
        b = loc // block_size
        if b == run and pos == last + 1:
            out[-1] = (b, out[-1][1], pos)
            last = pos
            continue
        out.append((b, pos, pos))
        run, last = b, pos
    return out


Reservation = tuple[Request, Sequence[int], int | None]
"""A reservation: the request, its slots, and the position of its first slot in the request's table (None:
not known any more)."""


def forward_events(reserved: Sequence[Reservation], rows: Sequence[Any], previous: Sequence[Any],
                   block_size: int, held: set[tuple[int, int]] | None = None,
                   holds: Callable[[int, int], bool] | None = None) -> tuple[Entries, Entries]:
    """One forward's journal entries (ALLOCATED, WRITTEN), the general way (one loop over the rows).

    ``reserved``: the reservations made since the last forward, in order: one ALLOCATED entry per block
    each names, carrying the positions of the first run its own request writes into that block in this
    forward, else the positions the reservation gives its slots there. ``rows``: the forward's rows (``req``,
    ``positions``, ``locs``; ``req`` None is padding). A run into a block its request was handed (in
    ``reserved``, or in ``held``: the (request id, block) pairs handed earlier in the step, updated here) or
    wrote in ``previous`` (the engine's previous forward's rows) adds nothing while the request still holds
    it (``holds(request id, block)``: the journal's holders; a block freed or handed to another request since
    is not its any more); any other run is a WRITTEN entry, one per request and block (the first and last
    position of its runs there). Slots <= 0 are left out."""
    a_blocks: list[int] = []
    a_owners: list[Owner | None] = []
    a_firsts: list[int | None] = []
    a_lasts: list[int | None] = []
    handed: dict[tuple[int, int], int] = {}
    for req, slots, start in reserved:
        owner = _owner_of(req.rid)
        for i, s in enumerate(slots):
            if s <= 0:
                continue
            b = s // block_size
            pos = None if start is None else start + i
            at = handed.get((req.rid, b))
            if at is not None:
                a_lasts[at] = pos
                continue
            handed[req.rid, b] = len(a_blocks)
            a_blocks.append(b)
            a_owners.append(owner)
            a_firsts.append(pos)
            a_lasts.append(pos)
    wrote_first: set[int] = set()  # allocation entries whose positions are now the first write's
    before: set[tuple[int, int]] | None = None
    wrote: dict[tuple[int, int], list[int]] = {}  # (request, block) -> [first, last], in first-write order
    for row in rows:
        req = row.req
        if req is None:
            continue
        rid = req.rid
        for b, first, last in _runs(row, block_size):
            key = (rid, b)
            at = handed.get(key)
            if at is not None:
                if at not in wrote_first:
                    wrote_first.add(at)
                    a_firsts[at], a_lasts[at] = first, last
                continue
            span = wrote.get(key)
            if span is not None:  # another run of the same request into the same block: one entry
                span[0], span[1] = min(first, span[0]), max(last, span[1])
                continue
            if held is not None and key in held:
                known = True
            else:
                if before is None:
                    before = {(p.req.rid, pb) for p in previous if p.req is not None
                              for pb, _, _ in _runs(p, block_size)}
                known = key in before
            if not known or (holds is not None and not holds(rid, b)):
                wrote[key] = [first, last]
    if held is not None:
        held.update(handed)
    written: Entries = ([b for _, b in wrote], [_owner_of(rid) for rid, _ in wrote],
                        [f for f, _ in wrote.values()], [la for _, la in wrote.values()])
    return (a_blocks, a_owners, a_firsts, a_lasts), written


def starts(reqs: Sequence[Request], slots: Sequence[Sequence[int]]) -> list[int | None]:
    """The table position of each reservation's first slot, read after the reservations (a request's
    reservations end at its ``alloc_len``, each one after the one before); None where that is gone (the
    request left before a forward wrote the slots)."""
    end: dict[int, int] = {}
    out: list[int | None] = [None] * len(reqs)
    for i in range(len(reqs) - 1, -1, -1):
        r = reqs[i]
        e = end.get(r.rid, r.alloc_len) - len(slots[i])
        end[r.rid] = e
        if e >= 0 and not r.row_released:
            out[i] = e
    return out


_last_owners: list[Any] = [[], []]
"""The requests of the last forward :func:`reserved_writes` took and their owners (a steady decode batch
names the same requests step after step: their owners are not looked up again)."""


def reserved_writes(reqs: list[Request], slots: list[list[int]], rows: Sequence[Any]) -> Entries | None:
    """The ALLOCATED entries of a forward whose rows write exactly the slots just reserved for them (the
    same requests, in the same order, the same slot lists: every correct decode and prefill forward), with
    the positions each row writes, in one block per slot; None when the forward is not that one (then
    :func:`forward_events` decides). No per-row Python loop: ``map`` over the rows and list comparisons."""
    if len(reqs) != len(rows):
        return None
    if list(map(_REQ, rows)) != reqs:
        return None
    locs = list(map(_LOCS, rows))
    if locs != slots:
        return None
    blocks = list(chain.from_iterable(locs))
    positions: list[int | None] = list(chain.from_iterable(map(_POSITIONS, rows)))
    if len(positions) != len(blocks) or (blocks and min(blocks) <= 0):
        return None
    if reqs == _last_owners[0]:  # the same requests as the last forward's (a steady decode batch)
        owners = _last_owners[1]
    else:
        owners = list(map(_owner_of, map(_RID, reqs)))
        _last_owners[:] = reqs, owners
    lens = list(map(len, locs))
    if lens.count(1) != len(lens):  # rows of other than one slot (prefill chunks): each slot its row's owner
        owners = list(chain.from_iterable(map(repeat, owners, lens)))
    return blocks, owners, positions, positions


def _holds(journal: SlotJournal) -> Callable[[int, int], bool]:
    """Whether ``journal`` has request ``rid`` holding ``block`` now (allocated, shared or written to it and not
    released or freed since)."""
    size = journal.block_size

    def holds(rid: int, block: int) -> bool:
        return _owner_of(rid) in journal.holders(block * size)
    return holds


class JournalFeed:
    """Feeds ``engine``'s managers' journals from its ownership changes (installed once, by the engine)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.seconds = 0.0
        """Host time spent making and recording journal events so far (what the feed adds to the engine's
        step; a reservation's wrapper, which only keeps the request and its slot list, is not timed, nor is
        freeing the previous forward's rows the feed held: the engine frees its rows each step anyway)."""
        self._reqs: list[Request] = []
        self._slots: list[list[int]] = []
        """The reservations since the last forward (request, slot list), filed with that forward's writes."""
        self._step = -1
        """The step the kept reservations were made at."""
        self._filed: list[tuple[list[Request], list[list[int]]]] = []
        """The reservations filed so far in step ``_step`` (read only when a forward needs the general path)."""
        self._previous: list[Any] = []
        """The engine's previous forward's rows (a reference: read only when a forward needs the general path)."""
        table, mem = engine.requests, engine.memory
        rec = self._record

        orig_reserve = table.reserve

        def reserve(req: Request, slots: list[int]) -> None:
            orig_reserve(req, slots)
            if self._step != engine.step_index:
                self._new_step()
            self._reqs.append(req)
            self._slots.append(slots)

        orig_admit = table.admit

        def admit(req: Request, slots: list[int], node: Any) -> None:
            orig_admit(req, slots, node)
            rec(JournalKind.SHARED, slots, _req(req))

        orig_receive = table.receive_transfer

        def receive_transfer(req: Request, tokens: Sequence[int], slots: list[int]) -> None:
            orig_receive(req, tokens, slots)  # slots[i] holds position i's KV (and record), copied in: a write
            self._record_written(slots, _req(req))

        def leaving(orig: Callable[..., None]) -> Callable[..., None]:
            def wrapped(req: Request, *args: Any, **kwargs: Any) -> None:
                held = mem.r2t.read(req.row, 0, req.alloc_len) if not req.row_released else []
                orig(req, *args, **kwargs)
                rec(JournalKind.RELEASED, held, _req(req))
            return wrapped

        orig_free = mem.free_slots

        def free_slots(slots: list[int]) -> None:
            orig_free(slots)
            rec(JournalKind.FREED, slots, None)

        table.reserve = reserve  # type: ignore[method-assign]
        table.admit = admit  # type: ignore[method-assign]
        table.receive_transfer = receive_transfer  # type: ignore[method-assign]
        table._retire = leaving(table._retire)  # type: ignore[method-assign]
        table._release = leaving(table._release)  # type: ignore[method-assign]
        mem.free_slots = free_slots  # type: ignore[method-assign]
        tree = mem.tree
        if tree is not None:
            orig_insert = tree.insert

            def insert(keys: list[Any], slots: list[int]) -> int:
                present = orig_insert(keys, slots)
                rec(JournalKind.CACHED, slots[present:], CACHE_OWNER)
                return present

            def evicted(slots: list[int]) -> None:
                rec(JournalKind.RELEASED, slots, CACHE_OWNER)
                orig_free(slots)
                rec(JournalKind.FREED, slots, None)

            tree.insert = insert  # type: ignore[method-assign]
            tree._on_free = evicted
        swa = mem.swa
        if swa is not None:
            swa_alloc = swa.allocator
            orig_swa_free = swa_alloc.free

            def swa_free(indices: Iterable[int]) -> None:
                freed = list(indices)
                orig_swa_free(freed)
                rec(JournalKind.FREED, freed, None, swa=True)

            swa_alloc.free = swa_free  # type: ignore[method-assign]
        runner = engine.runner
        orig_build = runner.build

        def build(rows: list[Any], **kwargs: Any) -> Any:
            if engine.managers:
                t0 = perf_counter()
                previous = self._forward(rows)
                self.seconds += perf_counter() - t0
                del previous  # freed untimed: without the feed the engine frees its rows at its step's end
            else:
                self._reqs, self._slots = [], []
            return orig_build(rows, **kwargs)

        runner.build = build  # type: ignore[method-assign]

    def _new_step(self) -> None:
        """A reservation in a new step: file what is kept of the last one, forget what it filed."""
        if self._reqs:
            self._flush()
        self._filed.clear()
        self._step = self.engine.step_index

    def _take(self) -> tuple[list[Request], list[list[int]]]:
        """The kept reservations, handed over (and kept as filed in this step)."""
        taken = self._reqs, self._slots
        self._reqs, self._slots = [], []
        self._filed.append(taken)
        return taken

    def _held(self, block_size: int, earlier: bool) -> set[tuple[int, int]]:
        """(request id, block) pairs handed out earlier in this step (``earlier``: reservations were filed
        before this forward's; the last filed are this forward's own)."""
        if not earlier:
            return set()
        return {(r.rid, s // block_size) for reqs, slots in self._filed[:-1]
                for r, ss in zip(reqs, slots, strict=True) for s in ss if s > 0}

    def _forward(self, rows: list[Any]) -> list[Any]:
        """File the kept reservations and ``rows``' writes (one forward) into every journal; returns the
        previous forward's rows, which the feed held until now (the caller drops them)."""
        if self.engine.step_index != self._step:
            self._new_step()
        journals = [m.journal for m in self.engine.managers]
        step = self._step
        earlier = bool(self._filed)
        reqs, slots = self._take()
        fast = reqs and all(j.block_size == 1 for j in journals) and reserved_writes(reqs, slots, rows)
        if fast:
            for j in journals:
                j.record_each(j.filing_step(step), JournalKind.ALLOCATED, *fast)
        else:
            reserved = list(zip(reqs, slots, starts(reqs, slots), strict=True))
            sizes: dict[int, tuple[Entries, Entries]] = {}
            for j in journals:
                made = sizes.get(j.block_size)
                if made is None:
                    held = self._held(j.block_size, earlier)
                    made = sizes[j.block_size] = forward_events(reserved, rows, self._previous, j.block_size, held,
                                                                _holds(j))
                allocated, written = made
                if allocated[0]:
                    j.record_each(j.filing_step(step), JournalKind.ALLOCATED, *allocated)
                if written[0]:
                    j.record_each(j.filing_step(step), JournalKind.WRITTEN, *written)
        previous, self._previous = self._previous, rows
        return previous

    def _flush(self) -> None:
        """File the kept reservations as ALLOCATED events with the positions they give their slots (another
        event comes before their forward: it must not overtake them)."""
        t0 = perf_counter()
        reqs, slots = self._take()
        reserved = list(zip(reqs, slots, starts(reqs, slots), strict=True))
        for j in (m.journal for m in self.engine.managers):
            made = forward_events(reserved, (), (), j.block_size)[0]
            if made[0]:
                j.record_each(j.filing_step(self._step), JournalKind.ALLOCATED, *made)
        self.seconds += perf_counter() - t0

    def _record_written(self, slots: Sequence[int], owner: Owner) -> None:
        """A PD transfer's slots, ALLOCATED to ``owner`` with the position each holds (``slots[i]``: position
        ``i``): the copy wrote their records, so attribution names the receiver as their last writer."""
        if self._reqs:
            self._flush()
        t0 = perf_counter()
        kept = [(s, p) for p, s in enumerate(slots) if s > 0]
        if kept:
            blocks, positions = [s for s, _ in kept], [p for _, p in kept]
            for m in self.engine.managers:
                j = m.journal
                j.record_each(j.filing_step(self.engine.step_index), JournalKind.ALLOCATED,
                              [b // j.block_size for b in blocks], [owner] * len(blocks), positions, positions)
        self.seconds += perf_counter() - t0

    def _record(self, kind: JournalKind, slots: Sequence[int], owner: Owner | None, *, swa: bool = False) -> None:
        if self._reqs:
            self._flush()
        t0 = perf_counter()
        blocks = [s for s in slots if s > 0]
        if blocks:
            for m in self.engine.managers:
                j = m.swa_journal if swa else m.journal
                j.record(j.filing_step(self.engine.step_index), kind, blocks, owner)
        self.seconds += perf_counter() - t0

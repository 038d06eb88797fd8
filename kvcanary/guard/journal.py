"""The slot journal: a bounded, host-side record of who held each KV block, and when.

The engine adapter (or the manager, from what it already maps each step) records ownership changes per
block: allocated to a request, written at positions, shared with another request, kept by the prefix
cache, freed, quarantined, released from quarantine. The cost is one entry per change, never one per
token, and no Python object per entry: the entries are numpy columns filled by a few slice assignments per
record call. :meth:`SlotJournal.owners_at` answers "who held this slot at step S", which is what isolation
needs for a violation read back steps after the corrupting one, and what evidence bundles show.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from itertools import pairwise
from typing import NamedTuple

import numpy as np
import numpy.typing as npt


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


Ints = npt.NDArray[np.int64]

NO_OWNER = -1
"""Owner code of an event that names no owner (FREED, QUARANTINED, ...); also "no position"."""

_MANY = -2
"""Holder-state value of a block with two or more holders (they are in the side table)."""

_KINDS: tuple[JournalKind, ...] = tuple(JournalKind)
_KIND_CODE: dict[JournalKind, int] = {k: i for i, k in enumerate(_KINDS)}
_ADD_CODES = frozenset(_KIND_CODE[k] for k in _ADDS)
_RELEASED, _FREED = _KIND_CODE[JournalKind.RELEASED], _KIND_CODE[JournalKind.FREED]
_QUARANTINED, _REINSTATED = _KIND_CODE[JournalKind.QUARANTINED], _KIND_CODE[JournalKind.REINSTATED]
_MAX_REQUEST_CODE = 1 << 62

JournalObserver = Callable[[int, JournalKind, list[int], Owner | None], None]
"""Called with ``(step, kind, blocks, owner)`` after each record call, once per run of entries with the same
owner (a Python call per run: for tests and slow paths; see :data:`ColumnObserver`)."""

ColumnObserver = Callable[[int, JournalKind, Ints], None]
"""Called with ``(step, kind, blocks)`` after each record call of a kind it asked for, the blocks as one int64
array (the journal's holder state already includes the call): the write-time owner check's map."""


def _ints(values: Sequence[int] | Ints, name: str) -> Ints:
    arr = np.asarray(values, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError(f"SlotJournal: {name} must be one-dimensional (got shape {arr.shape})")
    return arr


class _Holders:
    """Who holds each block: one holder code per block in a dense int64 array (``NO_OWNER``: nobody), and
    for a block with two or more holders ``_MANY`` there and their codes, in the order they took it, in the
    side table ``more`` (a shared prefix: the cache and the requests that hit it). Every update is a few
    vectorised numpy operations; a Python step per entry only for a block that is (or becomes) shared."""

    def __init__(self) -> None:
        self.one: Ints = np.full(0, NO_OWNER, dtype=np.int64)
        self.more: dict[int, list[int]] = {}

    def grow(self, size: int) -> None:
        old = self.one
        self.one = np.full(size, NO_OWNER, dtype=np.int64)
        self.one[:old.shape[0]] = old

    def of(self, block: int) -> list[int]:
        if block >= self.one.shape[0]:
            return []
        o = int(self.one[block])
        if o == NO_OWNER:
            return []
        return list(self.more[block]) if o == _MANY else [o]

    def apply(self, kind: int, blocks: Ints, codes: Ints | int) -> None:
        """Apply one run of entries of ``kind`` (one code for all, or one per entry)."""
        if kind in _ADD_CODES:
            self.add(blocks, codes)
        elif kind == _RELEASED:
            self.release(blocks, codes)
        elif kind == _FREED:
            self.free(blocks)

    def add(self, blocks: Ints, codes: Ints | int) -> None:
        if isinstance(codes, int):
            if codes == NO_OWNER:
                return
            want: Ints = np.full(blocks.shape[0], codes, dtype=np.int64)
        else:
            keep = codes != NO_OWNER
            want = codes
            if not keep.all():
                blocks, want = blocks[keep], codes[keep]
        one = self.one
        was = one[blocks]
        simple = (was == NO_OWNER) | (was == want)
        if simple.all():
            one[blocks] = want
            lost = one[blocks] != want
            if lost.any():  # a block named twice in the run, with two owners: the later one took the entry
                self._add_each(blocks[lost], want[lost])
            return
        one[blocks[simple]] = want[simple]
        rest = ~simple | (one[blocks] != want)  # held by another owner, or lost to another entry of the run
        self._add_each(blocks[rest], want[rest])

    def _add_each(self, blocks: Ints, codes: Ints) -> None:
        one, more = self.one, self.more
        for b, c in zip(blocks.tolist(), codes.tolist(), strict=True):
            o = int(one[b])
            if o == NO_OWNER:
                one[b] = c
            elif o == _MANY:
                if c not in more[b]:
                    more[b].append(c)
            elif o != c:
                more[b] = [o, c]
                one[b] = _MANY

    def release(self, blocks: Ints, codes: Ints | int) -> None:
        one = self.one
        was = one[blocks]
        hit = was == codes
        one[blocks[hit]] = NO_OWNER
        if self.more:
            for i in np.flatnonzero(was == _MANY).tolist():
                self._release_one(int(blocks[i]), codes if isinstance(codes, int) else int(codes[i]))

    def _release_one(self, b: int, c: int) -> None:
        """Release ``c`` from shared block ``b`` (an earlier entry of the same run may have unshared it)."""
        one = self.one
        held = self.more.get(b)
        if held is None:
            if int(one[b]) == c:
                one[b] = NO_OWNER
            return
        if c in held:
            held.remove(c)
            if len(held) == 1:
                one[b] = held[0]
                del self.more[b]

    def free(self, blocks: Ints) -> None:
        self.one[blocks] = NO_OWNER
        if self.more:
            for b in np.intersect1d(blocks, np.fromiter(self.more, dtype=np.int64)).tolist():
                del self.more[b]


_CACHE_BASE = -(1 << 40)
"""Interned prefix-cache owners have codes at or below this (interned requests above it, below -2)."""


class _State:
    """Who holds each block: the requests' holder state and the prefix cache's, apart (a cached block a
    request holds too is the common shared block: it costs no side-table entry)."""

    def __init__(self) -> None:
        self.req = _Holders()
        self.cache = _Holders()

    def grow(self, size: int) -> None:
        self.req.grow(size)
        self.cache.grow(size)

    def of(self, block: int) -> list[int]:
        return self.req.of(block) + self.cache.of(block)

    def copy(self) -> _State:
        out = _State()
        for mine, theirs in ((self.req, out.req), (self.cache, out.cache)):
            theirs.one = mine.one.copy()
            theirs.more = {b: list(held) for b, held in mine.more.items()}
        return out

    def apply(self, kind: int, blocks: Ints, codes: Ints | int) -> None:
        """Apply one run of entries of ``kind``: each entry to the requests' state or the cache's by its code."""
        if kind == _FREED:
            self.req.free(blocks)
            self.cache.free(blocks)
            return
        if kind not in _ADD_CODES and kind != _RELEASED:
            return
        if isinstance(codes, int):
            (self.cache if codes <= _CACHE_BASE else self.req).apply(kind, blocks, codes)
            return
        cached = codes <= _CACHE_BASE
        if not cached.any():
            self.req.apply(kind, blocks, codes)
        elif cached.all():
            self.cache.apply(kind, blocks, codes)
        else:
            rest = ~cached
            self.req.apply(kind, blocks[rest], codes[rest])
            self.cache.apply(kind, blocks[cached], codes[cached])


class SlotJournal:
    """Ownership events of KV blocks, kept in a ring of numpy columns, with the holder state of every block.

    **What is remembered.** The newest ``capacity`` events (of every block together) in a ring of preallocated
    columns: step, kind, block, owner code, first and last position (41 bytes an event: 2.7 MB at the default
    65536). Beside the ring, for every block number seen (below ``max_blocks``; arrays grown by doubling up to
    the highest block seen, 17 bytes a block): who holds it now, who held it before its oldest kept event (one
    owner code per block in each, a side table for the blocks with two or more holders: a shared prefix), and
    whether it is quarantined. Both holder states are folded from the ring's events by runs of one kind, a few
    numpy operations a run: the state before the ring when the ring overwrites events (an eighth of it at a
    time); the state of now when it is asked (:meth:`holds`, :meth:`holder_classes`: the write-time owner
    check), made then from the state before the ring and kept up to date before each later fold.
    So :meth:`holders`, :meth:`quarantined` and :meth:`owners_at` of a block whose events fell off the ring
    still answer; :meth:`history` gives only the kept events. **What is forgotten first**: the oldest events (a
    window that starts before the oldest kept event of the block misses owners that came and left before it),
    then the owners: non-numeric owners are interned (one int code per owner, at most ``max_owners``, the least
    recently named forgotten first; an event of a forgotten owner reads as no owner). A request owner whose id
    is a decimal integer is its own code: an engine passes its int request ids as the owner column.

    Recording: :meth:`record_columns` files one kind for a whole array of blocks (one owner for all, or an
    owner code per entry) with a slice assignment per column and a few vectorised updates of the holder
    state; no Python object is made per event. :meth:`record` and :meth:`record_each` are the same for
    Python lists and :class:`Owner` objects.

    It also keeps when each request finished (:meth:`finish`, at most ``max_finished`` of them, oldest
    forgotten first): a request that read a slot and finished before the violation was read back cannot be
    failed any more, only reported."""

    def __init__(self, *, block_size: int, capacity: int = 1 << 16, max_blocks: int = 1 << 24,
                 max_owners: int = 1 << 16, max_finished: int = 1 << 14) -> None:
        from kvcanary.constructors.journal import check_slot_journal  # the rules, with their codes (KVC-X)

        check_slot_journal(block_size=block_size, capacity=capacity, max_blocks=max_blocks,
                           max_owners=max_owners, max_finished=max_finished)
        self.block_size = block_size
        self.capacity = capacity
        self.max_blocks = max_blocks
        self.max_owners = max_owners
        self.max_finished = max_finished
        self._step: Ints = np.zeros(capacity, dtype=np.int64)
        self._kind = np.zeros(capacity, dtype=np.int8)
        self._block: Ints = np.full(capacity, -1, dtype=np.int64)
        self._owner: Ints = np.full(capacity, NO_OWNER, dtype=np.int64)
        self._first: Ints = np.full(capacity, NO_OWNER, dtype=np.int64)
        self._last: Ints = np.full(capacity, NO_OWNER, dtype=np.int64)
        self._folded = 0
        """Events folded into ``_base`` (the ring holds events ``[_folded, recorded)``)."""
        self._now_at = 0
        """Events folded into ``_now`` (the rest is folded on demand: :meth:`_catch_up`)."""
        self._now_live = False
        """Whether ``_now`` is kept (made when first asked for)."""
        self._size = 0
        """Blocks the dense state covers (block numbers below it)."""
        self._now = _State()
        self._base = _State()
        self._quarantined = np.zeros(0, dtype=np.bool_)
        self._codes: dict[Owner, int] = {}
        self._named: dict[int, Owner] = {}
        self._serial = 0
        self._finished: dict[str, int] = {}
        self.recorded = 0
        """Events recorded since creation (dropped ones included)."""
        self._observers: list[JournalObserver] = []
        self._column_observers: list[tuple[frozenset[JournalKind], ColumnObserver]] = []

    def add_observer(self, observer: JournalObserver) -> None:
        """Call ``observer(step, kind, blocks, owner)`` after every record call that names a block, once per run
        of entries with the same owner."""
        self._observers.append(observer)

    def add_column_observer(self, observer: ColumnObserver, kinds: Iterable[JournalKind]) -> None:
        """Call ``observer(step, kind, blocks)`` after every record call of one of ``kinds`` (blocks as an int64
        array; one call per record call, whatever its owners)."""
        self._column_observers.append((frozenset(kinds), observer))

    def block_of(self, slot: int) -> int:
        return slot // self.block_size

    # -- owners <-> codes ---------------------------------------------------------------------------------
    def owner_code(self, owner: Owner | None) -> int:
        """``owner``'s int code: a request whose id is a decimal integer is that integer; any other owner is
        interned (the ``max_owners`` most recently named are kept); ``NO_OWNER`` for None."""
        if owner is None:
            return NO_OWNER
        i = owner.id
        if owner.kind is OwnerKind.REQUEST and i.isascii() and i.isdigit() and (i == "0" or i[0] != "0") \
                and len(i) < 19:
            return int(i)
        codes = self._codes
        code = codes.pop(owner, None)
        if code is None:
            code = (_CACHE_BASE if owner.kind is OwnerKind.CACHE else -3) - self._serial
            self._serial += 1
            self._named[code] = owner
            if len(codes) >= self.max_owners:
                del self._named[codes.pop(next(iter(codes)))]
        codes[owner] = code
        return code

    def owner_of(self, code: int) -> Owner | None:
        """The owner with ``code`` (None: no owner, or an interned owner forgotten since)."""
        if code >= 0:
            return Owner(OwnerKind.REQUEST, str(code))
        return self._named.get(code)

    # -- recording ----------------------------------------------------------------------------------------
    def _fit(self, blocks: Ints) -> None:
        """Grow the dense state to cover ``blocks`` (by doubling), or say which block is out of range."""
        lo, hi = int(blocks.min()), int(blocks.max())
        if lo < 0 or hi >= self.max_blocks:
            bad = lo if lo < 0 else hi
            raise ValueError(f"SlotJournal: blocks must be in [0, max_blocks={self.max_blocks}) (got {bad}); "
                             f"pass a larger max_blocks for a pool of more blocks")
        size = min(self.max_blocks, max(hi + 1, 2 * self._size, 1024))
        self._now.grow(size)
        self._base.grow(size)
        q = np.zeros(size, dtype=np.bool_)
        q[:self._size] = self._quarantined
        self._quarantined = q
        self._size = size

    def _fold(self, state: _State, done: int, count: int) -> None:
        """Apply the ring's events ``[done, done + count)`` (absolute numbers, still kept) to ``state``: one
        vectorised update per run of events of one kind (consecutive record calls of one kind are one run)."""
        cap = self.capacity
        at = done % cap
        while count > 0:
            n = min(count, cap - at)
            kinds = self._kind[at:at + n]
            cuts = (np.flatnonzero(kinds[1:] != kinds[:-1]) + 1).tolist()
            for a, e in pairwise([0, *cuts, n]):
                state.apply(int(kinds[a]), self._block[at + a:at + e], self._owner[at + a:at + e])
            count -= n
            at = 0

    def _catch_up(self) -> None:
        """Bring the holder state of now up to the newest event. It is folded on demand, not per record call
        (a decode step's records cost their column writes only), and made only when first asked: from the
        state before the ring and the kept events; from then on it is kept up to date before each fold of
        the ring."""
        if not self._now_live:
            self._now = self._base.copy()
            self._now_at = self._folded
            self._now_live = True
        if self._now_at < self.recorded:
            self._fold(self._now, self._now_at, self.recorded - self._now_at)
            self._now_at = self.recorded

    def _make_room(self, m: int) -> None:
        """Fold the oldest kept events into the state before the ring so that ``m`` more fit: at least an
        eighth of the ring at a time (fewer, larger runs), the state of now first (it must see them too)."""
        live = self.recorded - self._folded
        over = live + m - self.capacity
        if over <= 0:
            return
        if self._now_live:
            self._catch_up()
        count = min(live, max(over, self.capacity // 8))
        self._fold(self._base, self._folded, count)
        self._folded += count

    def record_columns(self, step: int, kind: JournalKind, blocks: Sequence[int] | Ints,
                       owners: Sequence[int] | Ints | int | Owner | None = None,
                       firsts: Sequence[int] | Ints | None = None, lasts: Sequence[int] | Ints | None = None) -> None:
        """Record ``kind`` at ``step`` for each of ``blocks`` (an int64 array, or ints): for ``owners`` (one
        :class:`Owner`, owner code or None for all, or one owner code per block: see :meth:`owner_code`; a
        request's int id is its code), positions ``firsts[i]..lasts[i]`` where given (negative: none). No
        Python object per entry: a slice assignment per column."""
        b = _ints(blocks, "blocks")
        n = b.shape[0]
        code: Ints | int
        if owners is None or isinstance(owners, Owner):
            code = self.owner_code(owners)
        elif isinstance(owners, int | np.integer):
            code = int(owners)
        else:
            code = _ints(owners, "owners")
            if code.shape[0] != n:
                raise ValueError(f"SlotJournal.record_columns: owners must be as long as blocks "
                                 f"(blocks has {n}, owners {code.shape[0]})")
        f: Ints | int = NO_OWNER if firsts is None else _ints(firsts, "firsts")
        la: Ints | int = f if lasts is firsts else NO_OWNER if lasts is None else _ints(lasts, "lasts")
        for name, col in (("firsts", f), ("lasts", la)):
            if not isinstance(col, int) and col.shape[0] != n:
                raise ValueError(f"SlotJournal.record_columns: {name} must be as long as blocks "
                                 f"(blocks has {n}, {name} {col.shape[0]})")
        if not n:
            return
        if int(b.view(np.uint64).max()) >= self._size:  # one check for both ends: a negative block is huge here
            self._fit(b)
        k = _KIND_CODE[kind]
        cap = self.capacity
        at = self.recorded % cap
        if at + n <= cap and self.recorded + n - self._folded <= cap:  # room, no wrap: a slice per column
            end = at + n
            self._block[at:end] = b
            self._owner[at:end] = code
            self._first[at:end] = f
            self._last[at:end] = la
            self._step[at:end] = step
            self._kind[at:end] = k
            self.recorded += n
            done = n
        else:
            done = 0
        while done < n:  # more than the ring holds in one call: in pieces of the ring's size
            m = min(n - done, cap)
            self._make_room(m)
            at = self.recorded % cap
            end = min(at + m, cap)
            cut = end - at
            for col, val in ((self._block, b), (self._owner, code), (self._first, f), (self._last, la)):
                if isinstance(val, int):
                    col[at:end] = val
                    if cut < m:
                        col[:m - cut] = val
                else:
                    col[at:end] = val[done:done + cut]
                    if cut < m:
                        col[:m - cut] = val[done + cut:done + m]
            self._step[at:end] = step
            self._kind[at:end] = k
            if cut < m:
                self._step[:m - cut] = step
                self._kind[:m - cut] = k
            self.recorded += m
            done += m
        if k == _QUARANTINED:
            self._quarantined[b] = True
        elif k == _REINSTATED:
            self._quarantined[b] = False
        for kinds, observe_columns in self._column_observers:
            if kind in kinds:
                observe_columns(step, kind, b)
        if self._observers:
            self._tell(step, kind, b, code)

    def _tell(self, step: int, kind: JournalKind, blocks: Ints, code: Ints | int) -> None:
        """The per-run observers: one call per run of entries with the same owner."""
        if isinstance(code, int):
            runs = [(0, blocks.shape[0], code)]
        else:
            cuts = [0, *(np.flatnonzero(code[1:] != code[:-1]) + 1).tolist(), code.shape[0]]
            runs = [(a, e, int(code[a])) for a, e in pairwise(cuts)]
        for a, e, c in runs:
            part = blocks[a:e].tolist()
            owner = self.owner_of(c)
            for observe in self._observers:
                observe(step, kind, part, owner)

    def record(self, step: int, kind: JournalKind, blocks: Iterable[int], owner: Owner | None = None, *,
               first_position: int | None = None, last_position: int | None = None) -> None:
        """Record ``kind`` for each of ``blocks`` at ``step`` (one owner and positions for all)."""
        named = [int(x) for x in blocks]
        if not named:
            return
        f = None if first_position is None else [first_position] * len(named)
        la = None if last_position is None else [last_position] * len(named)
        self.record_columns(step, kind, named, owner, f, la)

    def record_each(self, step: int, kind: JournalKind, blocks: Sequence[int], owners: Sequence[Owner | None],
                    firsts: Sequence[int | None] | None = None, lasts: Sequence[int | None] | None = None) -> None:
        """Record one ``kind`` event per entry at ``step``: ``blocks[i]`` for ``owners[i]``, positions
        ``firsts[i]..lasts[i]`` where given (None: none). The sequences run in parallel (Python lists and
        :class:`Owner` objects: each owner is coded here; :meth:`record_columns` takes the codes)."""
        n = len(blocks)
        if len(owners) != n or (firsts is not None and len(firsts) != n) or (lasts is not None and len(lasts) != n):
            raise ValueError(f"record_each: blocks, owners, firsts and lasts must be as long as each other "
                             f"(blocks has {n})")
        if not n:
            return
        memo: dict[Owner | None, int] = {}
        codes = []
        for o in owners:
            c = memo.get(o)
            if c is None:
                c = memo[o] = self.owner_code(o)
            codes.append(c)
        self.record_columns(step, kind, blocks, codes, _positions(firsts), _positions(lasts))

    # -- finished requests --------------------------------------------------------------------------------
    def finish(self, request_id: str, step: int) -> None:
        """``request_id`` finished (its output was returned) at ``step``."""
        self._finished.pop(request_id, None)
        if len(self._finished) >= self.max_finished:
            del self._finished[next(iter(self._finished))]
        self._finished[request_id] = step

    def finished_step(self, request_id: str) -> int | None:
        """The step ``request_id`` finished at, None while it has not (or was forgotten)."""
        return self._finished.get(request_id)

    # -- queries (on a violation: a numpy scan of the ring) -----------------------------------------------
    def _kept(self, block: int) -> Ints:
        """Ring indices of ``block``'s kept events, oldest first."""
        cap = self.capacity
        live = self.recorded - self._folded
        start = self._folded % cap
        idx = np.flatnonzero(self._block == block)
        age = (idx - start) % cap
        keep = age < live
        return idx[keep][np.argsort(age[keep], kind="stable")]

    def history(self, slot: int) -> list[JournalEvent]:
        """The events kept for ``slot``'s block (those still in the ring), oldest first."""
        block = self.block_of(slot)
        out = []
        for i in self._kept(block).tolist():
            first, last = int(self._first[i]), int(self._last[i])
            out.append(JournalEvent(int(self._step[i]), _KINDS[int(self._kind[i])], block,
                                    self.owner_of(int(self._owner[i])), None if first < 0 else first,
                                    None if last < 0 else last))
        return out

    def _before(self, block: int) -> dict[Owner, None]:
        """Who held ``block`` before its oldest kept event (folded from the events the ring overwrote)."""
        out: dict[Owner, None] = {}
        for c in self._base.of(block):
            owner = self.owner_of(c)
            if owner is not None:
                out[owner] = None
        return out

    def owners_at(self, slot: int, step: int) -> list[Owner]:
        """Who held ``slot``'s block during ``step``: every owner added at or before ``step`` and not released
        before it (one released or freed during ``step`` still held it during that step)."""
        return self.owners_between(slot, step, step)

    def owners_between(self, slot: int, first_step: int, last_step: int) -> list[Owner]:
        """Who held ``slot``'s block during any step of ``[first_step, last_step]``, in the order they
        took it: what a violation recorded at ``first_step`` and read back at ``last_step`` must isolate
        (a request that took a corrupt block after the corruption read it too). The holders before the
        block's oldest kept event count as holding it when the window opens."""
        held = self._before(self.block_of(slot))
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
        """Who holds ``slot``'s block after every event recorded for it (added and not released or freed
        since), in the order they took it."""
        block = self.block_of(slot)
        held = self._before(block)
        for e in self.history(slot):
            if e.kind in _ADDS and e.owner is not None:
                held[e.owner] = None
            elif e.kind is JournalKind.RELEASED and e.owner is not None:
                held.pop(e.owner, None)
            elif e.kind is JournalKind.FREED:
                held.clear()
        return list(held)

    def holds(self, slot: int, owner: Owner) -> bool:
        """Whether ``owner`` holds ``slot``'s block now (the holder state: no scan)."""
        self._catch_up()
        return self.owner_code(owner) in self._now.of(self.block_of(slot))

    def holder_classes(self, blocks: Ints) -> npt.NDArray[np.int8]:
        """Per block of ``blocks`` (an int64 array): 0 when nobody holds it now, 1 when only prefix-cache owners
        do, 2 when a request does (vectorised: what a release leaves, for the owner check's map)."""
        self._catch_up()
        inside = blocks < self._size
        req = np.full(blocks.shape[0], NO_OWNER, dtype=np.int64)
        cache = req.copy()
        req[inside] = self._now.req.one[blocks[inside]]
        cache[inside] = self._now.cache.one[blocks[inside]]
        return np.where(req != NO_OWNER, 2, np.where(cache != NO_OWNER, 1, 0)).astype(np.int8)

    def quarantined(self, slot: int) -> bool:
        """Whether ``slot``'s block is quarantined now (its last quarantine is not followed by a reinstate)."""
        block = self.block_of(slot)
        return bool(self._quarantined[block]) if 0 <= block < self._size else False


def _positions(values: Sequence[int | None] | None) -> list[int] | None:
    if values is None:
        return None
    return [NO_OWNER if v is None else v for v in values]

"""The slot journal: a bounded, host-side record of who held each KV block, and when.

The engine adapter (or the manager, from what it already maps each step) records ownership changes per
block: allocated to a request, written at positions, shared with another request, kept by the prefix
cache, freed, quarantined, released from quarantine. The cost is one entry per change, never one per
token. :meth:`SlotJournal.owners_at` answers "who held this slot at step S", which is what isolation needs
for a violation read back steps after the corrupting one, and what evidence bundles show.

A recording call keeps no Python object per event: its sequences become machine arrays at once (an owner
becomes an int code, :mod:`kvcanary.guard.journal_codes`), and every 16,384 events they are appended to
a ring of numpy columns in one vectorised pass (:mod:`kvcanary.guard.journal_ring`). What leaves the ring is
folded into each block's base state (:mod:`kvcanary.guard.journal_base`): holders and the quarantine flag stay
exact forever; a window of steps is exact while the ring still holds its events (:meth:`SlotJournal.covers`).
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn, TypeVar

import numpy as np

from kvcanary.guard.journal_base import BlockBase
from kvcanary.guard.journal_codes import NO_OWNER, OwnerCodes
from kvcanary.guard.journal_events import (
    ADD_CODES,
    FREED,
    KIND_CODE,
    KINDS,
    RELEASED,
    JournalEvent,
    JournalKind,
    Owner,
    OwnerKind,
)
from kvcanary.guard.journal_memo import MEMO_MIN, Memo, prune, replay
from kvcanary.guard.journal_ring import NO_POSITION, EventRing

__all__ = ["JournalEvent", "JournalKind", "JournalObserver", "Owner", "OwnerKind", "SlotJournal"]

JournalObserver = Callable[[int, JournalKind, list[int], Owner | None], None]
"""Called with ``(step, kind, blocks, owner)`` after each :meth:`SlotJournal.record` (the owner map)."""

_NO_POSITIONS: array[int] = array("Q", [NO_POSITION])
_ALL_ONES = b"\xff" * 8
""":data:`NO_POSITION`'s bytes (every byte set, whatever the byte order)."""
_V = TypeVar("_V")  # what a request's kept finish or end holds (its step, or nothing)
_FLUSH_EVENTS = 1 << 14
"""Pending events that trigger a flush into the ring (a read flushes at once)."""
_WHO = "kv-canary: SlotJournal."
"""What each error's text starts with, before the method that refused the call."""


class _Pending:
    """Recorded calls not in the ring yet: per call its step, kind code and event count in one machine array
    (appending them checks the step), and its events' machine arrays (blocks, owner codes, first and last
    positions) in a list: appending a call makes no object per event."""

    def __init__(self) -> None:
        self.meta = array("q")
        self.parts: list[tuple[array[int], array[int], array[int], array[int]]] = []
        self.n = 0


class SlotJournal:
    """Ownership events per block id below ``max_blocks``: the newest events in a ring of ``capacity`` (a
    power of two; once full it folds its oldest eighth, at most 16,384 events, at a time, so it holds between
    ``capacity`` less that and ``capacity``), every older one folded into its block's base state (see the module).

    Recording costs a few machine-array conversions per call, not per event: :meth:`record` files one kind
    for a list of blocks and one owner, :meth:`record_each` a whole step's events of one kind, each with its
    own block, owner and positions, in one call (an engine's feed calls it once per step, not once per
    request). A steady batch that passes the same owners list as its last call maps no owner again. Steps
    never go back: a call below the latest recorded step is refused (a window's replay relies on the order).

    What it answers: :meth:`holders` and :meth:`quarantined` from every event ever recorded for the block (a
    busy block's from its memo and the events after it, :mod:`kvcanary.guard.journal_memo`);
    :meth:`history`, the block's newest ``per_block`` events still in the ring; :meth:`owners_between`, exact
    for a window the ring covers (:meth:`covers`). Memory: about 50 bytes per ring event, about 35 bytes per
    block id below the largest one recorded, a dict per block several owners hold and per memo (a block
    whose read walked 32 events or more, while its newest event is in the ring), and one table entry per
    owner still named (rebuilt down to those once it has doubled: a stall of tens of ms at 2^20 events, see
    :mod:`kvcanary.guard.journal_codes`).

    It also keeps when each request finished (:meth:`finish`, at most ``max_finished`` of them, oldest
    forgotten first): a request that read a slot and finished before the violation was read back cannot be
    failed any more, only reported. Which requests ended unfinished (:meth:`end`: failed) is kept the same way.
    A request id names one request from the block it takes to its finish or end: once the id takes a block
    again (an ADD event: ``ALLOCATED``, ``SHARED``, ``WRITTEN`` or ``CACHED`` with its request owner) it is a
    new request (an engine that takes the client's id, a client that retries), and the finish or end of the
    one before is forgotten."""

    def __init__(self, *, block_size: int, per_block: int = 64, max_blocks: int = 1 << 20,
                 max_finished: int = 1 << 14, capacity: int = 1 << 20) -> None:
        from kvcanary.constructors.journal import check_slot_journal  # the rules, with their codes (KVC-X)

        check_slot_journal(block_size=block_size, per_block=per_block, max_blocks=max_blocks,
                           max_finished=max_finished, capacity=capacity)
        self.block_size = block_size
        self.per_block = per_block
        self.max_blocks = max_blocks
        self.max_finished = max_finished
        self.capacity = capacity
        self._finished: dict[str, int] = {}
        self._ended: dict[str, None] = {}
        """Requests :meth:`end` named that have not taken a block since (at most ``max_finished``)."""
        self._watch: dict[int, str] = {}
        """Owner code -> request id of every request finished or ended (its next ADD event starts a new request:
        :meth:`_restart`); its code stays in the table while it is here."""
        self._watch_version = 0
        """Bumped when :attr:`_watch` gains an id (a steady batch already checked is checked again)."""
        self._checked_version = -1
        """:attr:`_watch_version` when the cached last call's owners were checked against it."""
        self.recorded = 0
        """Events recorded since creation."""
        self._observers: list[tuple[JournalObserver, frozenset[JournalKind] | None]] = []
        self._hear: dict[JournalKind, list[JournalObserver]] = {k: [] for k in JournalKind}
        """Per kind, the observers that hear it."""
        self._codes = OwnerCodes()
        self._code_of = self._codes.code_of.__getitem__
        self._base = BlockBase()
        self._ring = EventRing(capacity, self._base.fold)
        self._blocks = 0
        """Block ids below this have room in the dense per-block arrays."""
        self._pending = _Pending()
        self._flush_at = min(_FLUSH_EVENTS, capacity // 8)
        self._last_owners: list[Owner | None] | None = None
        self._last_codes: array[int] = array("q")
        """The owners list of the last :meth:`record_each` (a copy) and its codes, reused while they match."""
        self._memos: dict[int, Memo] = {}
        """Per busy block, its state after its newest event read so far (:mod:`kvcanary.guard.journal_memo`)."""
        self.latest_step = -1 << 63
        """The step of the latest recording call (steps never go back: a call below it is refused)."""

    def filing_step(self, step: int) -> int:
        """The step to file an event of ``step`` at: ``step``, or the latest recorded one when something already
        filed a later step (an isolate decision applied from a manager's ``end_step``, whose step has advanced,
        files that step's end first): an adapter's events of that moment belong to it, and steps never go back."""
        return step if step >= self.latest_step else self.latest_step

    def add_observer(self, observer: JournalObserver, kinds: Iterable[JournalKind] | None = None) -> None:
        """Call ``observer(step, kind, blocks, owner)`` after every recording call of one of ``kinds`` (every
        kind when None) that names a block (:meth:`record_each`: once per run of entries with one owner).
        ``kinds`` is a collection of :class:`JournalKind` (a set): a lone kind is refused, not split."""
        heard = None if kinds is None else _kind_set(kinds)
        self._observers.append((observer, heard))
        self._hear = {k: [o for o, ks in self._observers if ks is None or k in ks] for k in JournalKind}

    def block_of(self, slot: int) -> int:
        return slot // self.block_size

    # -- recording --------------------------------------------------------------------------------------
    def _block_array(self, where: str, blocks: Sequence[int]) -> array[int]:
        """``blocks`` as uint64 (C-level: a negative or non-integer one raises here), each below
        ``max_blocks``."""
        try:
            out = array("Q", blocks)
        except (TypeError, OverflowError):
            bad = next((b for b in blocks if not _is_int(b) or not 0 <= b < self.max_blocks), None)
            raise ValueError(f"{_WHO}{where}: blocks must be block ids in [0, max_blocks={self.max_blocks}), "
                             f"got {bad!r}") from None
        top = max(blocks) if type(blocks) is list else max(out)
        if top >= self.max_blocks:
            raise ValueError(f"{_WHO}{where}: blocks must be block ids in [0, max_blocks={self.max_blocks}), got {top} "
                             f"(the journal's max_blocks: the pool's block count)")
        if top >= self._blocks:
            self._grow(operator.index(top) + 1)  # a numpy int or a 0-d tensor: a Python int from here on
        return out

    def _grow(self, n: int) -> None:
        size = min(self.max_blocks, max(n, 2 * self._blocks, 1024))
        self._ring.ensure_blocks(size)
        self._base.ensure_blocks(size)
        self._blocks = size

    def _kind_code(self, where: str, kind: JournalKind) -> int:
        code = KIND_CODE.get(kind) if isinstance(kind, JournalKind) else None
        if code is None:
            raise TypeError(f"{_WHO}{where}: kind must be a JournalKind, got {type(kind).__name__} {kind!r}")
        return code

    def _add(self, where: str, step: int, kcode: int, blocks: array[int], codes: array[int], firsts: array[int],
             lasts: array[int]) -> None:
        """File one call's events (every argument checked already, but ``step``: checked first here)."""
        p = self._pending
        n = len(blocks)
        self._file_step(where, p.meta, step, kcode, n)
        p.parts.append((blocks, codes, firsts, lasts))
        p.n += n
        self.recorded += n
        if p.n >= self._flush_at:
            self._flush()
        if self._codes.due():
            self._rebuild_codes()

    def _file_step(self, where: str, meta: array[int], step: int, kcode: int, n: int) -> None:
        """Append a call's ``(step, kind code, count)`` to ``meta``; a step that is no int, out of int64, or
        below the latest one recorded is refused (nothing kept: a window's replay stops at its first event past
        the window, which is only right while steps never go back)."""
        try:
            meta.extend((step, kcode, n))
        except (TypeError, OverflowError):
            self._refuse_step(where, step)
        if meta[-3] < self.latest_step:
            del meta[-3:]
            self._refuse_step(where, step)
        self.latest_step = meta[-3]

    def _refuse_step(self, where: str, step: object) -> NoReturn:
        """Raise the error for a step :meth:`_file_step` refuses (no int, out of int64, or going back)."""
        try:
            value = operator.index(step)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(f"{_WHO}{where}: step must be an int, got {type(step).__name__} {step!r}") from None
        if not -(1 << 63) <= value < 1 << 63:
            raise ValueError(f"{_WHO}{where}: step must be in [-2**63, 2**63), got {value}")
        raise ValueError(f"{_WHO}{where}: step must not go back: got {value}, below the latest recorded step "
                         f"{self.latest_step}")

    def record(self, step: int, kind: JournalKind, blocks: Iterable[int], owner: Owner | None = None, *,
               first_position: int | None = None, last_position: int | None = None) -> None:
        """Record ``kind`` for each of ``blocks`` at ``step``."""
        named = blocks if type(blocks) is list else list(blocks)
        if not named:
            return
        kcode = self._kind_code("record", kind)
        b = self._block_array("record", named)
        try:
            code = self._code_of(owner)
        except TypeError as err:
            raise TypeError(f"{_WHO}record: owner must be an Owner or None, got {type(owner).__name__} "
                            f"{owner!r}") from err
        first = _positions("record", "first_position", [first_position])
        last = _positions("record", "last_position", [last_position])
        n = len(b)
        restart = bool(self._watch) and kcode < ADD_CODES and code in self._watch
        self._add("record", step, kcode, b, array("q", [code]) * n, first * n, last * n)
        if restart:  # _add may have rebuilt the owner table (renumbering the watch): look the code up again
            self._restart(self._code_of(owner))
        hear = self._hear[kind]
        if hear:
            listed = b.tolist()
            for observe in hear:
                observe(step, kind, listed, owner)

    def record_each(self, step: int, kind: JournalKind, blocks: Sequence[int], owners: Sequence[Owner | None],
                    firsts: Sequence[int | None] | None = None, lasts: Sequence[int | None] | None = None) -> None:
        """Record one ``kind`` event per entry at ``step``: ``blocks[i]`` for ``owners[i]``, positions
        ``firsts[i]..lasts[i]`` where given (a step's writes, one per request and block written). The
        sequences run in parallel; blocks are ints already (the caller's own lists, not tensors)."""
        n = len(blocks)
        if len(owners) != n or (firsts is not None and len(firsts) != n) or (lasts is not None and len(lasts) != n):
            raise ValueError(f"{_WHO}record_each: blocks, owners, firsts and lasts must be as long as each other "
                             f"(blocks has {n})")
        if not n:
            return
        kcode = KIND_CODE[kind] if type(kind) is JournalKind else self._kind_code("record_each", kind)
        try:
            b = array("Q", blocks)
        except (TypeError, OverflowError):
            b = self._block_array("record_each", blocks)  # raises, naming the bad block
        top = max(blocks) if type(blocks) is list else max(b)
        if top >= self._blocks:
            self._block_array("record_each", blocks)  # past the dense arrays: grows them, or raises
        fresh = not (type(owners) is list and owners == self._last_owners)
        if not fresh:
            codes = self._last_codes  # a steady batch: the same owners as the last call
        else:
            try:
                codes = array("q", map(self._code_of, owners))
            except TypeError as err:
                raise TypeError(f"{_WHO}record_each: owners must be Owners or None ({err})") from None
            if type(owners) is list:  # cached unchecked (a non-ADD or refused call checks nothing)
                self._last_owners, self._last_codes = list(owners), codes
                self._checked_version = -1
        try:  # C-level; NO_POSITION itself (or a bad position) goes the slow way, which raises
            f = _NO_POSITIONS * n if firsts is None else array("Q", firsts)  # type: ignore[arg-type, type-var]
            if firsts is not None and (raw := f.tobytes()).find(255) >= 0 and _ALL_ONES in raw:
                raise OverflowError
        except (TypeError, OverflowError):
            f = _positions("record_each", "firsts", firsts, n)
        if lasts is firsts:
            la = f
        else:
            try:
                la = _NO_POSITIONS * n if lasts is None else array("Q", lasts)  # type: ignore[arg-type]
                if lasts is not None and (raw := la.tobytes()).find(255) >= 0 and _ALL_ONES in raw:
                    raise OverflowError
            except (TypeError, OverflowError):
                la = _positions("record_each", "lasts", lasts, n)
        p = self._pending  # what _add does, inline: this is the engine's per-step call
        meta = p.meta
        try:
            meta.extend((step, kcode, n))
        except (TypeError, OverflowError):
            self._refuse_step("record_each", step)
        if meta[-3] < self.latest_step:
            del meta[-3:]
            self._refuse_step("record_each", step)
        self.latest_step = meta[-3]
        p.parts.append((b, codes, f, la))
        p.n += n
        self.recorded += n
        if p.n >= self._flush_at:
            self._flush()
        if self._watch and kcode < ADD_CODES and (fresh or self._checked_version != self._watch_version):
            self._restarts(codes)
        if fresh and self._codes.due():  # new owners may have grown the table
            self._rebuild_codes()
        hear = self._hear[kind]
        if hear:  # one call per run of entries with the same owner
            at = 0
            for i in range(1, n + 1):
                if i == n or owners[i] != owners[at]:
                    for observe in hear:
                        observe(step, kind, list(blocks[at:i]), owners[at])
                    at = i

    def _flush(self) -> None:
        """Append the pending calls' events to the ring (vectorised; in slices of at most half its capacity)."""
        p = self._pending
        if not p.n:
            return
        self._pending = _Pending()
        meta = np.frombuffer(p.meta, dtype=np.int64).reshape(-1, 3)
        counts = meta[:, 2]
        step = np.repeat(meta[:, 0], counts)
        kind = np.repeat(meta[:, 1].astype(np.int8), counts)
        parts = p.parts
        block = np.frombuffer(b"".join([q[0] for q in parts]), dtype=np.int64)
        owner = np.frombuffer(b"".join([q[1] for q in parts]), dtype=np.int64)
        first = np.frombuffer(b"".join([q[2] for q in parts]), dtype=np.uint64)
        last = np.frombuffer(b"".join([q[3] for q in parts]), dtype=np.uint64)
        most = self.capacity // 2
        oldest = self._ring.oldest
        for lo in range(0, p.n, most):
            at = slice(lo, lo + most)
            self._ring.append((step[at], kind[at], block[at], owner[at], first[at], last[at]))
        if self._memos and self._ring.oldest != oldest:
            prune(self._memos, self._ring.oldest)

    def _rebuild_codes(self) -> None:
        """Shrink the owner table to the codes something still names (the ring's live events, the base, the
        cached last call), renumbering them everywhere at once: no code is ever dropped while named."""
        self._flush()
        ring, codes = self._ring, self._codes
        live = np.zeros(len(codes), dtype=np.bool_)
        for at in ring.live():
            col = ring.owner[at]
            live[col[col >= 0]] = True
        live[self._base.codes()] = True
        cached = np.frombuffer(self._last_codes, dtype=np.int64)
        live[cached[cached >= 0]] = True
        watched = np.fromiter(self._watch, dtype=np.int64, count=len(self._watch))
        live[watched] = True
        remap = codes.rebuild(live)  # remap[-1] is NO_OWNER: -1 maps to -1
        self._memos.clear()  # they may name codes the table just dropped: the next reads replay in full
        for at in ring.live():
            ring.owner[at] = remap[ring.owner[at]]
        self._base.renumber(remap)
        self._last_codes = array("q", remap[cached].tobytes())
        self._watch = dict(zip(remap[watched].tolist(), self._watch.values(), strict=True))

    # -- request ends ---------------------------------------------------------------------------------
    def finish(self, request_id: str, step: int) -> None:
        """``request_id`` (a str, as its owner's id) finished (its output was returned) at ``step`` (an int): kept
        until the id takes a block again (a new request with the same id) or ``max_finished`` later finishes push
        it out. A value of another type is refused and nothing is kept (the read-back compares the step with
        its own, and an id with its owners')."""
        self._keep(self._finished, _request_id("finish", request_id), _step("finish", step))

    def end(self, request_id: str) -> None:
        """``request_id`` ended unfinished (the isolate policy failed it): :meth:`ended` until the id takes a
        block again (a retry with the same id) or ``max_finished`` later ends push it out."""
        self._keep(self._ended, _request_id("end", request_id), None)

    def _keep(self, kept: dict[str, _V], request_id: str, value: _V) -> None:
        """``request_id``'s finish or end into ``kept`` (newest last, at most ``max_finished``: the oldest is
        forgotten first), and its id watched for its next block."""
        kept.pop(request_id, None)
        if len(kept) >= self.max_finished:
            oldest = next(iter(kept))
            del kept[oldest]
            self._unwatch(oldest)
        kept[request_id] = value
        self._watch_id(request_id)

    def ended(self, request_id: str) -> bool:
        """Whether :meth:`end` named ``request_id`` and the id has taken no block since (nor was forgotten)."""
        return request_id in self._ended

    def _watch_id(self, request_id: str) -> None:
        code = self._code_of(Owner(OwnerKind.REQUEST, request_id))
        if code not in self._watch:
            self._watch[code] = request_id
            self._watch_version += 1
            if self._codes.due():
                self._rebuild_codes()

    def _unwatch(self, request_id: str) -> None:
        """Stop watching ``request_id`` once neither its finish nor its end is kept."""
        if request_id not in self._finished and request_id not in self._ended:
            self._watch.pop(self._codes.code_of.get(Owner(OwnerKind.REQUEST, request_id), NO_OWNER), None)

    def _restart(self, code: int) -> None:
        """The watched owner ``code`` took a block: a new request with its id (the last one's finish or end is
        forgotten)."""
        rid = self._watch.pop(code)
        self._finished.pop(rid, None)
        self._ended.pop(rid, None)

    def _restarts(self, codes: array[int]) -> None:
        """:meth:`_restart` each watched owner among a call's ``codes``; when they are the cached last call's,
        a steady batch passing them again is not checked again until the watch gains an id."""
        watch = self._watch
        if not watch.keys().isdisjoint(codes):
            for code in {c for c in codes if c in watch}:  # O(len(codes)): set.intersection(watch) walks the watch
                self._restart(code)
        if codes is self._last_codes:
            self._checked_version = self._watch_version

    # -- reading ----------------------------------------------------------------------------------------

    def finished_step(self, request_id: str) -> int | None:
        """The step ``request_id`` finished at, None while it has not (or was forgotten)."""
        return self._finished.get(request_id)

    def covers(self, step: int) -> bool:
        """Whether the ring still holds every event recorded at or after ``step`` (none was folded): a window
        starting there is answered exactly by :meth:`owners_between`. A window reaching past it can miss the
        holders that came and left before the ring's oldest event (the base keeps who holds a block, not who
        held it and left)."""
        self._flush()
        folded = self._ring.folded_step
        return folded is None or step > folded

    def _chain(self, slot: int, limit: int = -1) -> tuple[int, list[int]]:
        self._flush()
        block = slot // self.block_size
        return block, self._ring.chain(block, limit)

    def history(self, slot: int) -> list[JournalEvent]:
        """The newest ``per_block`` events of ``slot``'s block still in the ring, oldest first. When the block
        had older events (past ``per_block``, or folded into its base), the window is led by the block's state
        when it opens, as ``carried`` events (:class:`JournalEvent`): who held the block then and whether it was
        quarantined, so a reader replaying the window (attribution) starts from its holders, not from nobody,
        and can tell that the window is not the block's whole history."""
        block, chain = self._chain(slot, self.per_block)
        r, owners = self._ring, self._codes.owners
        out = []
        for i in chain:
            o, f, la = r.owner_mv[i], r.first_mv[i], r.last_mv[i]
            out.append(JournalEvent(r.step_mv[i], KINDS[r.kind_mv[i]], block, None if o < 0 else owners[o],
                                    None if f == NO_POSITION else f, None if la == NO_POSITION else la))
        older = r.prev_mv[chain[0]] >= 0 if chain else r.newest(block) >= 0
        return self._carried(block, len(chain)) + out if older else out

    def _carried(self, block: int, window: int) -> list[JournalEvent]:
        """``block``'s state before its newest ``window`` events in the ring (its base, then the ring's older
        events replayed), as carried events at the step of the last event before the window (a holder at the
        step it joined)."""
        ring, owners = self._ring, self._codes.owners
        chain = ring.chain(block)
        before = chain[: len(chain) - window]
        held = self._base.holders(block)
        quarantined = replay(ring, before, held, self._base.is_quarantined(block))
        at = ring.step_mv[before[-1]] if before else (ring.folded_step if ring.folded_step is not None else 0)
        out = [JournalEvent(joined, JournalKind.CACHED if owners[c].kind is OwnerKind.CACHE else JournalKind.SHARED,
                            block, owners[c], carried=True) for c, joined in held.items()]
        if quarantined:
            out.append(JournalEvent(at, JournalKind.QUARANTINED, block, carried=True))
        if not held:
            out.append(JournalEvent(at, JournalKind.RELEASED, block, carried=True))
        return out

    def owners_at(self, slot: int, step: int) -> list[Owner]:
        """Who held ``slot``'s block during ``step``: every owner added at or before ``step`` and not released
        before it (one released or freed during ``step`` still held it during that step)."""
        return self.owners_between(slot, step, step)

    def owners_between(self, slot: int, first_step: int, last_step: int) -> list[Owner]:
        """Who held ``slot``'s block during any step of ``[first_step, last_step]``, in the order they
        took it: what a violation recorded at ``first_step`` and read back at ``last_step`` must isolate
        (a request that took a corrupt block after the corruption read it too). Exact while
        ``covers(first_step)``; otherwise the holders that came and left before the ring's oldest event are
        missing (a base holder that joined after ``last_step`` is never named).

        A block whose newest event came before the window (its memo's step) was held all through the window
        by who holds it now; any other window is replayed from the base."""
        block = slot // self.block_size
        self._state(block)
        owners = self._codes.owners
        memo = self._memos.get(block)
        if memo is not None and memo.step < first_step and memo.step <= last_step:
            return [owners[c] for c in memo.held]
        chain = self._ring.chain(block)
        held = {c: None for c, joined in self._base.holders(block).items() if joined <= last_step}
        out: dict[int, None] = {}
        r = self._ring
        step_mv, kind_mv, owner_mv = r.step_mv, r.kind_mv, r.owner_mv
        for i in chain:
            s = step_mv[i]
            if s > last_step:
                break
            if s >= first_step:
                out.update(held)  # everything still held when the window opens was held in it
            k, o = kind_mv[i], owner_mv[i]
            if k < ADD_CODES and o >= 0:
                held[o] = None
                if s >= first_step:
                    out[o] = None
            elif s < first_step and k == RELEASED and o >= 0:
                held.pop(o, None)
            elif s < first_step and k == FREED:
                held.clear()
        out.update(held)
        return [owners[c] for c in out]

    def _state(self, block: int) -> Memo:
        """``block``'s state after every event recorded for it: its memo brought up to date (replaying only
        the events after it), else the base plus the block's events in the ring (kept as its memo when that
        walked at least :data:`~kvcanary.guard.journal_memo.MEMO_MIN` events). The caller only reads it."""
        self._flush()
        ring = self._ring
        newest = ring.newest(block)
        memo = self._memos.get(block)
        if memo is not None:
            if newest == memo.seq:
                return memo
            chain = ring.chain_after(block, memo.seq)
            if chain is not None:
                memo.quarantined = replay(ring, chain, memo.held, memo.quarantined)
                memo.seq, memo.step = newest, ring.step_mv[chain[-1]]
                return memo
            del self._memos[block]  # an event after it was folded: replay from the base
        chain = ring.chain(block)
        held = self._base.holders(block)
        quarantined = replay(ring, chain, held, self._base.is_quarantined(block))
        state = Memo(newest, ring.step_mv[chain[-1]] if chain else 0, held, quarantined)
        if len(chain) >= MEMO_MIN:
            self._memos[block] = state
        return state

    def holders(self, slot: int) -> list[Owner]:
        """Who holds ``slot``'s block after every event recorded for it (added and not released or freed
        since), in the order they took it."""
        owners = self._codes.owners
        return [owners[c] for c in self._state(slot // self.block_size).held]

    def quarantined(self, slot: int) -> bool:
        """Whether ``slot``'s block is quarantined now (its last quarantine is not followed by a reinstate)."""
        return self._state(slot // self.block_size).quarantined


def _kind_set(kinds: Iterable[JournalKind]) -> frozenset[JournalKind]:
    """``kinds`` as a set, each a :class:`JournalKind` (a lone kind or string is refused)."""
    if isinstance(kinds, str):
        fix = f"{{JournalKind.{kinds.name}}}" if isinstance(kinds, JournalKind) else "{JournalKind.FREED, ...}"
        raise TypeError(f"{_WHO}add_observer: kinds must be a collection of JournalKind, got {type(kinds).__name__} "
                        f"{kinds!r} (pass a set: kinds={fix})")
    try:
        out = frozenset(kinds)
    except TypeError:
        raise TypeError(f"{_WHO}add_observer: kinds must be a collection of JournalKind, got {type(kinds).__name__} "
                        f"{kinds!r}") from None
    bad = [k for k in out if not isinstance(k, JournalKind)]
    if bad:
        raise TypeError(f"{_WHO}add_observer: kinds must be JournalKind members, got {type(bad[0]).__name__} "
                        f"{bad[0]!r}")
    return out


def _request_id(where: str, request_id: object) -> str:
    """``request_id`` if it is a str (the ids :class:`Owner` carries: any other never matches one)."""
    if not isinstance(request_id, str):
        raise TypeError(f"{_WHO}{where}: request_id must be a str (the id its Owner carries), got "
                        f"{type(request_id).__name__} {request_id!r}")
    return request_id


def _step(where: str, step: object) -> int:
    """``step`` as a Python int (the read-back compares it with its own step); a bool is no step (True would
    be kept as step 1)."""
    if type(step) is int:
        return step
    if not isinstance(step, bool):
        try:
            return operator.index(step)  # type: ignore[arg-type]
        except TypeError:
            pass
    raise TypeError(f"{_WHO}{where}: step must be an int (the step the request finished at), got "
                    f"{type(step).__name__} {step!r}")


def _is_int(v: object) -> bool:
    try:
        operator.index(v)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def _positions(where: str, name: str, values: Sequence[int | None] | None, n: int = 1) -> array[int]:
    """Positions as uint64, None as :data:`NO_POSITION` (C-level when none is None and none is
    :data:`NO_POSITION`); each an int in ``[0, 2**64 - 1)``."""
    if values is None:
        return _NO_POSITIONS * n
    try:
        fast: array[int] = array("Q", values)  # type: ignore[arg-type]
        raw = fast.tobytes()  # 2**64 - 1 converts, but it is None's value: refused below (a run of eight 0xff
        if raw.find(255) < 0 or _ALL_ONES not in raw:  # bytes across two positions only sends them that way)
            return fast
    except (TypeError, OverflowError):
        pass
    out = array("Q")
    for v in values:
        if v is None:
            out.append(NO_POSITION)
            continue
        try:
            p = operator.index(v)
        except TypeError:
            raise TypeError(f"{_WHO}{where}: {name} must be ints or None, got {type(v).__name__} {v!r}") from None
        if not 0 <= p < NO_POSITION:
            raise ValueError(f"{_WHO}{where}: {name} must be positions in [0, 2**64 - 1) or None, got {p}")
        out.append(p)
    return out

"""The slot journal's event ring: the newest events as machine columns, each chained to its block's previous one.

Every event has a sequence number (``seq``, counted from 0 in recording order) and lives at ring index
``seq % size`` while it is live (``oldest <= seq < next_seq``). Its columns: step, kind code, block, owner
code (-1: none), first and last position (:data:`NO_POSITION`: none) and ``prev``, the seq of the same block's
event before it (-1: none). ``last_seq[block]`` is each block's newest seq, so a block's events are a walk
back from it along ``prev`` that stops below ``oldest``. The ring starts small and doubles up to its
capacity; full, it hands its oldest events (an eighth, at most :attr:`EventRing.CHUNK`) to a fold callback
(the journal's per-block base state) before overwriting them. Appending is vectorised: no Python work per
event.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

NO_POSITION = (1 << 64) - 1
"""A position column's value for "no position" (positions are kept as uint64; this one is never a position)."""

I64 = npt.NDArray[np.int64]

Columns = tuple[I64, npt.NDArray[np.int8], I64, I64, npt.NDArray[np.uint64], npt.NDArray[np.uint64]]
"""Events to append, in recording order: step, kind code, block, owner code, first and last position."""


class EventRing:
    """The live events of a journal (at most ``capacity``, a power of two) and each block's newest seq."""

    FIRST_SIZE = 4096
    """Events the ring holds before its first doubling (a journal that records little stays small)."""
    CHUNK = 1 << 14
    """Most events folded at once: a fold's temporaries (a few bytes per event each) stay in the CPU's cache."""

    def __init__(self, capacity: int, fold: Callable[[EventRing, int], None]) -> None:
        self.capacity = capacity
        self.chunk = min(capacity // 8, self.CHUNK)
        """Events folded at a time once the ring is full (its oldest eighth, at most :attr:`CHUNK`)."""
        self.fold = fold
        """``fold(ring, lo)``: the events ``[lo, lo + chunk)`` are about to be overwritten (their columns are
        :meth:`span`'s); called before :attr:`oldest` moves past them."""
        self.next_seq = 0
        self.oldest = 0
        self.folded_step: int | None = None
        """The largest step of a folded event (None while nothing was folded)."""
        self._alloc(min(capacity, self.FIRST_SIZE))
        self.last_seq = np.full(0, -1, dtype=np.int64)
        self._last_mv = self.last_seq.data

    def _alloc(self, size: int) -> None:
        self.size = size
        self.mask = size - 1
        self.step = np.empty(size, dtype=np.int64)
        self.kind = np.empty(size, dtype=np.int8)
        self.block = np.empty(size, dtype=np.int64)
        self.owner = np.empty(size, dtype=np.int64)
        self.first = np.empty(size, dtype=np.uint64)
        self.last = np.empty(size, dtype=np.uint64)
        self.prev = np.empty(size, dtype=np.int64)
        self.views()

    def views(self) -> None:
        """Memoryviews of the columns, for reading single events as Python ints (a walk, a query)."""
        self.step_mv = self.step.data
        self.kind_mv = self.kind.data
        self.owner_mv = self.owner.data
        self.first_mv = self.first.data
        self.last_mv = self.last.data
        self.prev_mv = self.prev.data

    def _grow(self) -> None:
        """Double the ring (only before it ever wrapped: every live seq is its own index, in both sizes)."""
        n = self.next_seq
        step, kind, block, owner, first, last, prev = (self.step, self.kind, self.block, self.owner, self.first,
                                                       self.last, self.prev)
        self._alloc(2 * self.size)
        self.step[:n], self.kind[:n], self.block[:n], self.owner[:n] = step[:n], kind[:n], block[:n], owner[:n]
        self.first[:n], self.last[:n], self.prev[:n] = first[:n], last[:n], prev[:n]

    def ensure_blocks(self, n: int) -> None:
        """Room in ``last_seq`` for block ids below ``n``."""
        have = len(self.last_seq)
        if n > have:
            grown = np.full(n, -1, dtype=np.int64)
            grown[:have] = self.last_seq
            self.last_seq = grown
            self._last_mv = grown.data

    def span(self, lo: int, n: int) -> slice:
        """Ring indices of seqs ``[lo, lo + n)``, which must not wrap (a fold's chunk never does)."""
        i = lo & self.mask
        return slice(i, i + n)

    def append(self, cols: Columns) -> None:
        """Append events (at most ``capacity // 2``; blocks below ``len(last_seq)``), chaining each to its
        block's previous event: repeated blocks among them in recording order (a stable sort, only when a
        block repeats)."""
        step, kind, block, owner, first, last = cols
        m = len(block)
        while self.next_seq + m - self.oldest > self.size:
            if self.size < self.capacity:
                self._grow()
            else:
                self.fold(self, self.oldest)
                self.folded_step = max(int(self.step[self.span(self.oldest, self.chunk)].max()),
                                       -1 << 63 if self.folded_step is None else self.folded_step)
                self.oldest += self.chunk
        seqs = np.arange(self.next_seq, self.next_seq + m, dtype=np.int64)
        ls = self.last_seq
        prev = ls.take(block)
        ls.put(block, seqs, mode="clip")  # every block is below len(ls): clip skips numpy's bounds check
        if not (ls.take(block) == seqs).all():  # a block repeats: chain its events in order
            order = np.argsort(block, kind="stable")
            sb, ss = block[order], seqs[order]
            start = np.ones(m, dtype=np.bool_)
            start[1:] = sb[1:] != sb[:-1]
            ps = np.empty(m, dtype=np.int64)
            ps[1:] = ss[:-1]
            ps[start] = prev[order][start]  # a group's first event: the block's newest before these
            prev[order] = ps
            end = np.ones(m, dtype=np.bool_)
            end[:-1] = start[1:]
            ls[sb[end]] = ss[end]
        i = self.next_seq & self.mask
        head = min(m, self.size - i)
        for col, val in ((self.step, step), (self.kind, kind), (self.block, block), (self.owner, owner),
                         (self.first, first), (self.last, last), (self.prev, prev)):
            col[i:i + head] = val[:head]
            if head < m:
                col[:m - head] = val[head:]
        self.next_seq += m

    def chain(self, block: int, limit: int = -1) -> list[int]:
        """Ring indices of ``block``'s live events, oldest first (the newest ``limit`` when ``limit >= 0``)."""
        if not 0 <= block < len(self.last_seq):
            return []
        s = self._last_mv[block]
        oldest, mask, prev = self.oldest, self.mask, self.prev_mv
        out: list[int] = []
        while s >= oldest and limit != len(out):
            i = s & mask
            out.append(i)
            s = prev[i]
        out.reverse()
        return out

    def newest(self, block: int) -> int:
        """``block``'s newest seq (-1: none ever; it may have left the ring)."""
        return self._last_mv[block] if 0 <= block < len(self.last_seq) else -1

    def chain_after(self, block: int, after: int) -> list[int] | None:
        """Ring indices of ``block``'s events with a seq above ``after``, oldest first; None when one of them
        left the ring already (folded: the caller replays from the base)."""
        s = self.newest(block)
        oldest, mask, prev = self.oldest, self.mask, self.prev_mv
        out: list[int] = []
        while s > after:
            if s < oldest:
                return None
            i = s & mask
            out.append(i)
            s = prev[i]
        out.reverse()
        return out

    def live(self) -> list[slice]:
        """Ring indices of every live event (one or two slices)."""
        n = self.next_seq - self.oldest
        i = self.oldest & self.mask
        if i + n <= self.size:
            return [slice(i, i + n)]
        return [slice(i, self.size), slice(0, i + n - self.size)]

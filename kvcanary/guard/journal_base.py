"""The slot journal's per-block base state: what the events that left the ring add up to, exactly.

Before the ring overwrites its oldest events, :meth:`BlockBase.fold` applies them to each block's base: its
holders in the order they took it (each with the step it joined at) and whether it is quarantined, by the
same rules the journal's queries replay (an ADD kind adds its owner if absent, RELEASED removes its owner,
FREED clears, QUARANTINED / REINSTATED set / clear the flag). A query starts from the base and replays the
block's events still in the ring, so folding never changes an answer about who holds a block now.

The common groups are folded vectorised, through each event's ``prev`` (no sort): a block whose events in
the chunk each leave it with one holder or none that the event alone determines (an ADD onto nobody or onto
its own owner, a RELEASED by the only holder, a FREED) ends with its last event's holder. Every other block
(several holders, a quarantine, an event naming no owner) is replayed in Python, exactly.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import numpy.typing as npt

from kvcanary.guard.journal_codes import NO_OWNER
from kvcanary.guard.journal_events import ADD_CODES, FREED, RELEASED, apply_events
from kvcanary.guard.journal_ring import EventRing

I64 = npt.NDArray[np.int64]
_T = TypeVar("_T", bound=np.generic)

SEVERAL = -2
"""``owner`` of a block held by several owners (they are in :attr:`BlockBase.several`)."""

_STATE = np.dtype([("owner", np.int64), ("join", np.int64)])

_OPAQUE = -3
"""An event's own result when it does not determine the holders alone (a quarantine, no owner named)."""


class BlockBase:
    """Per block id below :attr:`n`: ``owner`` (the one holder's code, :data:`NO_OWNER` for none,
    :data:`SEVERAL`), ``join`` (the one holder's join step), ``quarantined``; ``several`` holds the blocks
    with several holders, each as ``{owner code: join step}`` in join order."""

    def __init__(self) -> None:
        self.n = 0
        self.state = np.zeros(0, dtype=_STATE)
        """Per block, its one holder (or none, or several) and that holder's join step, side by side: a fold
        writes both with one random access per block."""
        self.owner: I64 = self.state["owner"]
        self.join: I64 = self.state["join"]
        self.quarantined = np.zeros(0, dtype=np.bool_)
        self.several: dict[int, dict[int, int]] = {}
        self._dirty = np.zeros(0, dtype=np.bool_)  # scratch, all False between folds
        self._start = np.full(0, -1, dtype=np.int64)  # scratch, all -1 between folds

    def ensure_blocks(self, n: int) -> None:
        """Room for block ids below ``n`` (nobody holds a new one, it is not quarantined)."""
        if n <= self.n:
            return
        state = np.zeros(n, dtype=_STATE)
        state[:self.n] = self.state
        state["owner"][self.n:] = NO_OWNER
        self.state, self.owner, self.join = state, state["owner"], state["join"]
        self.quarantined = _grown(self.quarantined, n, False)
        self._dirty = _grown(self._dirty, n, False)
        self._start = _grown(self._start, n, -1)
        self.n = n

    def holders(self, block: int) -> dict[int, int]:
        """``block``'s base holders: owner code -> join step, in join order (a new dict: the caller's)."""
        if not 0 <= block < self.n:
            return {}
        code = int(self.owner[block])
        if code == NO_OWNER:
            return {}
        if code == SEVERAL:
            return dict(self.several[block])
        return {code: int(self.join[block])}

    def is_quarantined(self, block: int) -> bool:
        return 0 <= block < self.n and bool(self.quarantined[block])

    def fold(self, ring: EventRing, lo: int) -> None:
        """Apply the ring's events ``[lo, lo + ring.chunk)`` to the base (they leave the ring next).

        Random access into the per-block arrays (the slow part: one cache miss each) is kept to the events
        that need it: the base is read only for a block's first event in the chunk when the block had events
        before (a block never seen has no holder), and written once per block the chunk names."""
        at = ring.span(lo, ring.chunk)
        kind, block, owner, step, prev = ring.kind[at], ring.block[at], ring.owner[at], ring.step[at], ring.prev[at]
        n = len(kind)
        pred = prev - lo  # index in the chunk of each event's predecessor (< 0: before the chunk, or none)
        if self._fold_lone(kind, block, owner, step, pred):
            return
        named = owner >= 0
        adds = (kind < ADD_CODES) & named
        freed = kind == FREED
        resets = freed | ((kind == RELEASED) & named)
        res = np.where(adds, owner, np.where(resets, NO_OWNER, _OPAQUE))  # the holder each event leaves
        inner = pred >= 0
        links = pred[inner]
        before = np.full(n, NO_OWNER, dtype=np.int64)  # the holder before each event
        before[inner] = res[links]
        seen = np.flatnonzero((prev >= 0) & ~inner)  # a block's first event here, after events folded earlier
        if len(seen):
            before[seen] = self.owner[block[seen]]
        ok = freed | ((adds | resets) & ((before == NO_OWNER) | (before == owner)))
        last = np.ones(n, dtype=np.bool_)
        last[links] = False  # a block's last event in the chunk is nobody's predecessor
        dirty = np.flatnonzero(~ok)
        mark = self._dirty
        if len(dirty):
            mark[block[dirty]] = True
            clean = last & ~mark[block]
        else:
            clean = last
        if self.several and len(seen):  # a block several held that the chunk cleanly frees first
            for b in block[seen[before[seen] == SEVERAL]].tolist():
                if not mark[b]:
                    del self.several[b]
        starts = adds & (before == NO_OWNER)  # an owner joining a block nobody held
        lasts = np.flatnonzero(clean)
        # each clean block's holder joined at its group's latest start (lone: the event itself); none: the
        # holder goes on from the base (owner and join unchanged: nothing to write)
        start_at = np.where(starts[lasts] & ~inner[lasts], lasts, -1)
        runs = np.flatnonzero(inner[lasts] & (res[lasts] >= 0))  # longer groups ending with one holder
        if len(runs):
            first = self._start
            lead = np.flatnonzero(starts & (inner | ~last))  # the starts in longer groups
            np.maximum.at(first, block[lead], lead)
            start_at[runs] = first[block[lasts[runs]]]
            first[block[lead]] = -1
        held = res[lasts]
        write = np.flatnonzero((held == NO_OWNER) | (start_at >= 0))
        rows = np.zeros(len(write), dtype=_STATE)
        rows["owner"] = held[write]
        at_w = start_at[write]
        rows["join"] = np.where(at_w >= 0, step[at_w], 0)
        self.state[block[lasts[write]]] = rows
        if len(dirty):
            self._replay(np.flatnonzero(last & mark[block]), kind, block, owner, step, pred)
            mark[block[dirty]] = False

    def _fold_lone(self, kind: npt.NDArray[np.int8], block: I64, owner: I64, step: I64, pred: I64) -> bool:
        """The chunk folded the short way, if it can be: every event an ADD naming its owner, no block twice in
        the chunk, and each block's base holder nobody or that owner (a token-granular pool's steady decode: each
        slot allocated once). Then a block nobody held gets its event's owner, joined at its step, and every other
        is unchanged. Returns False, having written nothing, when the chunk is not that one."""
        if pred.max() >= 0 or kind.max() >= ADD_CODES or owner.min() < 0:
            return False
        before = self.owner[block]  # NO_OWNER for a block with no earlier event (not take: it copies the column)
        starts = before == NO_OWNER
        if not (starts | (before == owner)).all():
            return False
        joined = np.flatnonzero(starts)
        if len(joined):
            rows = np.empty(len(joined), dtype=_STATE)
            rows["owner"] = owner[joined]
            rows["join"] = step[joined]
            self.state[block[joined]] = rows
        return True

    def _replay(self, lasts: I64, kind: npt.NDArray[np.int8], block: I64, owner: I64, step: I64, pred: I64) -> None:
        """The blocks whose last event in the chunk is at ``lasts``: their events replayed on their base."""
        kind_mv, owner_mv, step_mv, pred_mv = kind.data, owner.data, step.data, pred.data
        for e, b in zip(lasts.tolist(), block[lasts].tolist(), strict=True):
            events = [e]
            while (e := pred_mv[e]) >= 0:
                events.append(e)
            held = self.holders(b)
            quarantined = apply_events(kind_mv, owner_mv, step_mv, reversed(events), held,
                                       bool(self.quarantined[b]))
            self.set_holders(b, held)
            self.quarantined[b] = quarantined

    def set_holders(self, block: int, held: dict[int, int]) -> None:
        """``block``'s base holders become ``held`` (owner code -> join step, in join order)."""
        if len(held) > 1:
            self.owner[block] = SEVERAL
            self.several[block] = held
            return
        self.several.pop(block, None)
        if held:
            ((code, joined),) = held.items()
            self.owner[block], self.join[block] = code, joined
        else:
            self.owner[block] = NO_OWNER

    def codes(self) -> I64:
        """Every owner code the base names (with repeats)."""
        one = self.owner[self.owner >= 0]
        many = [c for held in self.several.values() for c in held]
        return np.concatenate([one, np.array(many, dtype=np.int64)]) if many else one

    def renumber(self, remap: I64) -> None:
        """Owner codes renumbered through ``remap`` (old -> new; every code named here is kept)."""
        one = self.owner >= 0
        self.owner[one] = remap[self.owner[one]]
        self.several = {b: {int(remap[c]): j for c, j in held.items()} for b, held in self.several.items()}


def _grown(a: npt.NDArray[_T], n: int, fill: int | bool) -> npt.NDArray[_T]:
    """``a`` extended to ``n`` entries with ``fill``."""
    out: npt.NDArray[_T] = np.full(n, fill, dtype=a.dtype)
    out[:len(a)] = a
    return out

"""The slot journal's owner codes: each :class:`~kvcanary.guard.journal.Owner` as a small int, both ways.

The journal keeps owners as int codes in its machine columns (no Python object per event). A code is
handed out on an owner's first use and means that owner for as long as anything in the journal names it:
the table is never trimmed behind the journal's back. It only shrinks in :meth:`OwnerCodes.rebuild`, which
the journal calls with the codes still named (its ring, its per-block base state, its cached last call) and
which returns how to renumber them, so no code ever dangles or names another owner. -1 is "no owner"; no
code is an owner's own value (an owner is an :class:`Owner`, never a raw int), so no id can collide with it.

A rebuild is a stall of the recording call that triggers it, once per doubling of the table (at least 65,536
new owners): with a full 2^20-event ring and 65,600 live owners it took about 40 ms on a 2-core CPU host
(most of it re-hashing the live owners into the new table).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from kvcanary.guard.journal_events import Owner

NO_OWNER = -1
"""The code of ``None`` (an event that names no owner)."""


class _Table(dict[Owner | None, int]):
    """Owner -> code; indexing a new owner hands it the next code (the journal's hot path maps a call's owners
    with ``map(table.__getitem__, owners)``: a C-level lookup each, Python only for an owner's first use)."""

    def __init__(self, owners: list[Owner]) -> None:
        super().__init__({None: NO_OWNER})
        self.owners = owners

    def __missing__(self, owner: Owner | None) -> int:
        if type(owner) is not Owner:
            raise TypeError(f"an owner must be an Owner or None, got {type(owner).__name__} {owner!r}")
        code = self[owner] = len(self.owners)
        self.owners.append(owner)
        return code


class OwnerCodes:
    """The journal's intern table: :attr:`code_of` (owner -> code, new owners added) and :attr:`owners`
    (code -> owner), rebuilt down to the live codes once it has grown past ``max(2 * live, floor)``."""

    def __init__(self, *, floor: int = 1 << 16) -> None:
        self.owners: list[Owner] = []
        self.code_of = _Table(self.owners)
        self.floor = floor
        """The least size a rebuild waits for (a small table is never worth one)."""
        self.rebuild_at = floor
        """Size past which :meth:`due` says to rebuild (twice the live codes at the last rebuild, or the floor)."""

    def __len__(self) -> int:
        return len(self.owners)

    def due(self) -> bool:
        return len(self.owners) > self.rebuild_at

    def rebuild(self, live: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
        """Keep only the codes ``live`` marks (one entry per code), renumbered in their order; returns the
        lookup ``old code -> new code`` (-1 for a dropped one, which nothing may name any more), with one more
        entry at the end for :data:`NO_OWNER` (so ``remap[codes]`` maps -1 to -1)."""
        keep = np.flatnonzero(live)
        remap = np.full(len(self.owners) + 1, NO_OWNER, dtype=np.int64)
        remap[keep] = np.arange(len(keep), dtype=np.int64)
        kept = [self.owners[c] for c in keep.tolist()]
        self.owners[:] = kept
        self.code_of.clear()
        self.code_of[None] = NO_OWNER
        self.code_of.update(zip(kept, range(len(kept)), strict=True))
        self.rebuild_at = max(2 * len(kept), self.floor)
        return remap

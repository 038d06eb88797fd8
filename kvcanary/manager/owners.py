"""The device owner map of the write-time owner check (``Extensions(write_slot_owner_mismatch=True)``).

One int64 entry per canary slot of each pool group, as the write launcher's ``slot_owner`` wants it: the
``req_to_token`` row of the request that holds the slot, :data:`~kvcanary.consts.SLOT_OWNER_FREE` (-1) when
nobody does, :data:`SLOT_READ_ONLY` (-2) while it may only be read (kept by the prefix cache, quarantined).

"Owner" means *the request that wrote the slot first since it was last freed*. Before each forward's HEAD
launches, :meth:`OwnerMap.claim` gives every free slot the forward writes to the request row writing it
(device operations only, so it can be captured); the write kernels then flag any stored token whose slot has
another holder. A prefix share never fires: the sharing request reads the slot and never writes it. A write
into a slot another live request wrote first does (a double allocation), and so does a write into a slot
the prefix cache keeps. Two rows writing one free slot in the same forward: the larger row claims it, the
other's write fires.

Slots come back through the manager's journals, which the engine adapter feeds: FREED and REINSTATED make
a slot free, QUARANTINED read-only; a RELEASED that leaves the slot without a holder in the journal frees it,
and one that leaves only the prefix cache holding it makes it read-only (a slot the cache takes while its
writer still runs stays the writer's: a draft model writes its pool's copy of a prefix after the target's
prefill was cached). Those host events are queued and copied to the device once, in the next
:meth:`~kvcanary.manager.CanaryManager.prepare` (outside any graph); nothing is read back.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
import torch

from kvcanary.consts import REQ_POOL_IDX_PADDING, SLOT_OWNER_FREE, PoolKind
from kvcanary.guard.journal import JournalKind, SlotJournal
from kvcanary.manager.buffers import CanaryBufferGroup

SLOT_READ_ONLY: int = -2
"""Owner-map value of a slot that may be read but not written (kept by the prefix cache, quarantined)."""

_SET_TO: dict[JournalKind, int] = {
    JournalKind.FREED: SLOT_OWNER_FREE,
    JournalKind.REINSTATED: SLOT_OWNER_FREE,
    JournalKind.QUARANTINED: SLOT_READ_ONLY,
}


_WATCHED = (JournalKind.FREED, JournalKind.REINSTATED, JournalKind.QUARANTINED, JournalKind.RELEASED)
"""The journal events the map follows (an allocation, share, keep or write changes nothing here)."""

_AFTER_RELEASE = np.array([SLOT_OWNER_FREE, SLOT_READ_ONLY, 0], dtype=np.int64)
"""Map value after a release, by :meth:`SlotJournal.holder_classes`: free when nobody holds the slot, read-only
when only the prefix cache does; a slot a request still holds (class 2) is left as it is (its writer may write
it again)."""


class _GroupOwners:
    """The map of one group: ``num_slots + 1`` entries, the last a scratch entry for skipped tokens."""

    def __init__(self, num_slots: int, device: torch.device) -> None:
        self.num_slots = num_slots
        self.table = torch.full((num_slots + 1,), SLOT_OWNER_FREE, dtype=torch.int64, device=device)
        self.view = self.table[:num_slots]
        """What the write launches get as ``slot_owner``."""
        self.pending: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
        """(slots, values) arrays, queued on the host until :meth:`OwnerMap.apply_pending` (a later one wins)."""

    def queue(self, blocks: npt.NDArray[np.int64], values: npt.NDArray[np.int64], block_size: int) -> None:
        """Queue ``values[i]`` for every slot of ``blocks[i]`` (blocks of ``block_size`` slots; slots past the
        group's end are left out)."""
        if block_size != 1:
            blocks = (blocks[:, None] * block_size + np.arange(block_size, dtype=np.int64)).ravel()
            values = np.repeat(values, block_size)
        else:
            blocks = blocks.copy()  # the journal's caller may reuse its array
        inside = (blocks >= 0) & (blocks < self.num_slots)
        if not inside.all():
            blocks, values = blocks[inside], values[inside]
        if blocks.shape[0]:
            self.pending.append((blocks, values))

    def claim(self, loc: torch.Tensor, writer: torch.Tensor) -> None:
        n = self.num_slots
        ok = (loc >= 0) & (loc < n) & (writer != REQ_POOL_IDX_PADDING)
        idx = torch.where(ok, loc, n)
        held = self.table[idx]
        want = torch.where(held == SLOT_OWNER_FREE, writer, held)
        self.table.scatter_reduce_(0, idx, want, reduce="amax")
        self.table[n:].fill_(SLOT_OWNER_FREE)


class OwnerMap:
    """Per pool group (FULL, and SWA with its own slot numbers), the owner map the write launches check."""

    def __init__(self, groups: list[CanaryBufferGroup], device: torch.device) -> None:
        self._groups = {g.kind: _GroupOwners(g.num_slots, device) for g in groups}
        self._device = device
        self._journals: dict[PoolKind, SlotJournal] = {}

    def slot_owner(self, kind: PoolKind) -> torch.Tensor:
        """The ``slot_owner`` argument of ``kind``'s write launches (a fixed view: capture-safe)."""
        return self._groups[kind].view

    # -- per forward (device only) ---------------------------------------------------------------------
    def claim(self, *, req_pool_indices: torch.Tensor, extend_lens: torch.Tensor, out_cache_loc: torch.Tensor,
              swa_out_cache_loc: torch.Tensor | None) -> None:
        """Give every free slot this forward writes to the request row that writes it (padding rows and
        skipped tokens claim nothing). Device operations only: no value is read on the host."""
        n = int(out_cache_loc.shape[0])
        ends = torch.cumsum(extend_lens, 0)
        row = torch.searchsorted(ends, torch.arange(n, dtype=torch.int64, device=out_cache_loc.device),
                                 right=True)
        rows = torch.cat([req_pool_indices,
                          torch.full((1,), REQ_POOL_IDX_PADDING, dtype=torch.int64, device=out_cache_loc.device)])
        writer = rows[row]  # a token past the rows' tokens counts as a padding row's
        for kind, g in self._groups.items():
            loc = swa_out_cache_loc if kind is PoolKind.SWA else out_cache_loc
            if loc is not None:
                g.claim(loc, writer)

    # -- from the journals (host, queued) --------------------------------------------------------------
    def watch(self, journal: SlotJournal, kind: PoolKind) -> None:
        """Follow ``journal``'s events for ``kind``'s slots (a group the map does not have is ignored)."""
        if kind not in self._groups:
            return
        self._journals[kind] = journal
        journal.add_column_observer(lambda step, ev, blocks: self._on_event(kind, journal, ev, blocks), _WATCHED)

    def _on_event(self, kind: PoolKind, journal: SlotJournal, ev: JournalKind, blocks: npt.NDArray[np.int64]) -> None:
        if self._journals.get(kind) is not journal:
            return  # a journal the manager replaced
        value = _SET_TO.get(ev)
        if value is None:  # RELEASED: what the release leaves
            classes = journal.holder_classes(blocks)
            changed = classes != 2
            blocks = blocks[changed]
            values = _AFTER_RELEASE[classes[changed]]
        else:
            values = np.full(blocks.shape[0], value, dtype=np.int64)
        self._groups[kind].queue(blocks, values, journal.block_size)

    def set_slots(self, slots: Iterable[int], value: int, *, kind: PoolKind = PoolKind.FULL) -> None:
        """Queue ``value`` for ``slots`` of ``kind`` (an engine that feeds no journal, tests)."""
        idx = np.fromiter((int(s) for s in slots), dtype=np.int64)
        self._groups[kind].queue(idx, np.full(idx.shape[0], int(value), dtype=np.int64), 1)

    def apply_pending(self) -> None:
        """Copy the queued changes to the device (host, outside any graph: one small copy per group); a slot
        queued more than once gets its last value."""
        for g in self._groups.values():
            if g.pending:
                slots = np.concatenate([s for s, _ in g.pending])
                values = np.concatenate([v for _, v in g.pending])
                g.pending.clear()
                last, at = np.unique(slots[::-1], return_index=True)  # sorted slots, each with its last value
                idx = torch.from_numpy(last).to(self._device)
                val = torch.from_numpy(values[::-1][at].copy()).to(self._device)
                g.table.index_copy_(0, idx, val)

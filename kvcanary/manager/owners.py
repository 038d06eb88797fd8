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

import torch

from kvcanary.consts import REQ_POOL_IDX_PADDING, SLOT_OWNER_FREE, PoolKind
from kvcanary.guard.journal import JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.manager.buffers import CanaryBufferGroup

SLOT_READ_ONLY: int = -2
"""Owner-map value of a slot that may be read but not written (kept by the prefix cache, quarantined)."""

_SET_TO: dict[JournalKind, int] = {
    JournalKind.FREED: SLOT_OWNER_FREE,
    JournalKind.REINSTATED: SLOT_OWNER_FREE,
    JournalKind.QUARANTINED: SLOT_READ_ONLY,
}


_ACTS_ON = (*_SET_TO, JournalKind.RELEASED)
"""The journal events the map follows (an allocation, a share, a write or a cache changes nothing here: the
forward's own claim does): the journal calls the map for no other kind."""


def _after_release(holders: list[Owner]) -> int | None:
    """The map value after a release leaves ``holders``: free when nobody holds the slot, read-only when only
    the prefix cache does, unchanged (None) while a request still holds it (its writer may write it again)."""
    if not holders:
        return SLOT_OWNER_FREE
    if all(h.kind is OwnerKind.CACHE for h in holders):
        return SLOT_READ_ONLY
    return None


class _GroupOwners:
    """The map of one group: ``num_slots + 1`` entries, the last a scratch entry for skipped tokens."""

    def __init__(self, num_slots: int, device: torch.device) -> None:
        self.num_slots = num_slots
        self.table = torch.full((num_slots + 1,), SLOT_OWNER_FREE, dtype=torch.int64, device=device)
        self.view = self.table[:num_slots]
        """What the write launches get as ``slot_owner``."""
        self.pending: dict[int, int] = {}
        """Slot -> value, queued on the host until :meth:`OwnerMap.apply_pending`."""

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
        journal.add_observer(lambda step, ev, blocks, owner: self._on_event(kind, journal, ev, blocks, owner),
                             kinds=_ACTS_ON)

    def _on_event(self, kind: PoolKind, journal: SlotJournal, ev: JournalKind, blocks: Iterable[int],
                  owner: Owner | None) -> None:
        if self._journals.get(kind) is not journal:
            return  # a journal the manager replaced
        value = _SET_TO.get(ev)
        if value is None and ev is not JournalKind.RELEASED:
            return
        g = self._groups[kind]
        bs = journal.block_size
        for b in blocks:
            if value is None:
                value_b = _after_release(journal.holders(b * bs))
                if value_b is None:
                    continue
            else:
                value_b = value
            for s in range(b * bs, min((b + 1) * bs, g.num_slots)):
                g.pending[s] = value_b

    def set_slots(self, slots: Iterable[int], value: int, *, kind: PoolKind = PoolKind.FULL) -> None:
        """Queue ``value`` for ``slots`` of ``kind`` (an engine that feeds no journal, tests)."""
        g = self._groups[kind]
        for s in slots:
            if 0 <= s < g.num_slots:
                g.pending[int(s)] = int(value)

    def apply_pending(self) -> None:
        """Copy the queued changes to the device (host, outside any graph: one small copy per group)."""
        for g in self._groups.values():
            if g.pending:
                items = sorted(g.pending.items())
                g.pending.clear()
                idx = torch.tensor([s for s, _ in items], dtype=torch.int64).to(self._device)
                val = torch.tensor([v for _, v in items], dtype=torch.int64).to(self._device)
                g.table.index_copy_(0, idx, val)

"""Canary records of transferred slots: pack them at the sender, unpack them at the receiver's slots.

A record holds (token, position, prev_hash, real_kv_hash): no slot number. The chain is content-only, so a
record stays valid wherever it lands; moving a request's KV to other slot numbers ("re-keying") is just
writing each record at the receiver's slot for the same position. Both directions are device-side gathers
and scatters, one tensor for every canary buffer of the FULL group; the slots are checked first
(:mod:`~kvcanary.distributed.slots`: in ``[1, num_slots)``, one read-back when they live on the device).
"""

from __future__ import annotations

import torch

from kvcanary.consts import CANARY_SLOT_BYTES, PoolKind
from kvcanary.context import VerifyOrWriteContext
from kvcanary.distributed.slots import Entries, slot_index
from kvcanary.manager import CanaryManager


def record_buffers(manager: CanaryManager) -> list[tuple[str, torch.Tensor]]:
    """The FULL group's canary buffers a transfer carries (``full.k_head``, ``full.k_tail``, V when on).

    Raises ValueError for a manager with a sliding-window group: its records are indexed by SWA slot and
    are not carried by this API."""
    if any(g.kind is PoolKind.SWA for g in manager.groups):
        raise ValueError("kv-canary: manager has an SWA group; pack_records/unpack_records carry FULL-group "
                         "records only (SWA slots are not transferable through this API)")
    return [(n, t) for n, t in manager.transfer_buffers() if n.startswith("full.")]


def _slots(slots: Entries, manager: CanaryManager) -> torch.Tensor:
    return slot_index(slots, "slots", manager.groups[0].num_slots, manager.device)


def rotation_contexts(manager: CanaryManager) -> list[VerifyOrWriteContext]:
    """The FULL group's layer-rotation sets, in buffer order (none without rotation): their records travel with
    the others, and a transfer's verify runs on each."""
    return [s.context for g, rot in zip(manager.groups, manager.rotations, strict=True)
            if rot is not None and g.kind is PoolKind.FULL for s in rot.sets]


def rotation_layout(manager: CanaryManager) -> tuple[int, ...]:
    """The FULL group's layer-rotation layout: per rotation set, in buffer order, how many real-KV sources its
    records fingerprint (empty without rotation). Two managers whose records a transfer moves between must agree
    on it: a set's records fingerprint its own layers."""
    return tuple(len(c.real_kv_sources) for c in rotation_contexts(manager))


def packed_shape(manager: CanaryManager, num_slots: int) -> tuple[int, int, int]:
    """``(num_buffers, num_slots, 32)``: the shape :func:`pack_records` returns for ``num_slots`` slots."""
    return (len(record_buffers(manager)), num_slots, CANARY_SLOT_BYTES)


def pack_records(manager: CanaryManager, slots: Entries) -> torch.Tensor:
    """The records of ``slots`` (sender's slot numbers, in transfer order), every FULL buffer:
    ``uint8 [num_buffers, len(slots), 32]`` on the manager's device, in :func:`record_buffers` order."""
    idx = _slots(slots, manager)
    bufs = record_buffers(manager)
    return torch.stack([buf.index_select(0, idx) for _, buf in bufs])


def unpack_records(manager: CanaryManager, packed: torch.Tensor, slots: Entries) -> None:
    """Write ``packed`` (from :func:`pack_records` on the sender) at ``slots`` (the receiver's slot numbers,
    same order): the records are re-keyed by position in the transfer, not by the sender's slot numbers.

    Checks shape, dtype and device before writing anything: a packed tensor of the wrong size (a partial
    message) raises ValueError and leaves every buffer untouched."""
    idx = _slots(slots, manager)
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        raise ValueError("kv-canary: packed must be the uint8 tensor pack_records returned")
    want = packed_shape(manager, int(idx.shape[0]))
    if tuple(packed.shape) != want:
        raise ValueError(f"kv-canary: packed has shape {tuple(packed.shape)}, expected {want} "
                         "(num_buffers, len(slots), 32): a partial or mismatched records message")
    write_records(manager, packed, idx)


def write_records(manager: CanaryManager, packed: torch.Tensor, idx: torch.Tensor) -> None:
    """The write of :func:`unpack_records`, for a caller that has checked ``packed`` and the slot index
    ``idx`` (int64, in range, distinct) itself: no check, no read-back."""
    src = packed.to(manager.device, non_blocking=True)
    for i, (_, buf) in enumerate(record_buffers(manager)):
        buf.index_copy_(0, idx.to(manager.device), src[i])

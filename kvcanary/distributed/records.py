"""Canary records of transferred slots: pack them at the sender, unpack them at the receiver's slots.

A record holds (token, position, prev_hash, real_kv_hash): no slot number. The chain is content-only, so a
record stays valid wherever it lands; moving a request's KV to other slot numbers ("re-keying") is just
writing each record at the receiver's slot for the same position. Both directions are device-side gathers
and scatters (no host read of a device value), one tensor for every canary buffer of the FULL group.
"""

from __future__ import annotations

import torch

from kvcanary.consts import CANARY_SLOT_BYTES, PoolKind
from kvcanary.manager import CanaryManager


def record_buffers(manager: CanaryManager) -> list[tuple[str, torch.Tensor]]:
    """The FULL group's canary buffers a transfer carries (``full.k_head``, ``full.k_tail``, V when on).

    Raises ValueError for a manager with a sliding-window group: its records are indexed by SWA slot and
    are not carried by this API."""
    if any(g.kind is PoolKind.SWA for g in manager.groups):
        raise ValueError("kv-canary: manager has an SWA group; pack_records/unpack_records carry FULL-group "
                         "records only (SWA slots are not transferable through this API)")
    return [(n, t) for n, t in manager.transfer_buffers() if n.startswith("full.")]


def _check_slots(name: str, slots: torch.Tensor, manager: CanaryManager) -> torch.Tensor:
    """1-D int32/int64; on the host also in ``[1, num_slots)`` (slot 0 is the padding slot). Slots already
    on the device are not read back to check them."""
    if not isinstance(slots, torch.Tensor):
        raise TypeError(f"kv-canary: {name} must be a torch.Tensor, got {type(slots).__name__}")
    if slots.dtype not in (torch.int32, torch.int64) or slots.ndim != 1:
        raise ValueError(f"kv-canary: {name} must be a 1-D int32/int64 tensor, got {slots.dtype} "
                         f"{tuple(slots.shape)}")
    n = manager.groups[0].num_slots
    if slots.device.type == "cpu" and slots.numel() and not (int(slots.min()) >= 1 and int(slots.max()) < n):
        raise ValueError(f"kv-canary: {name} must hold slots in [1, {n}) (slot 0 is the padding slot), got "
                         f"values in [{int(slots.min())}, {int(slots.max())}]")
    return slots.to(device=manager.device, dtype=torch.int64, non_blocking=True)


def packed_shape(manager: CanaryManager, num_slots: int) -> tuple[int, int, int]:
    """``(num_buffers, num_slots, 32)``: the shape :func:`pack_records` returns for ``num_slots`` slots."""
    return (len(record_buffers(manager)), num_slots, CANARY_SLOT_BYTES)


def pack_records(manager: CanaryManager, slots: torch.Tensor) -> torch.Tensor:
    """The records of ``slots`` (sender's slot numbers, in transfer order), every FULL buffer:
    ``uint8 [num_buffers, len(slots), 32]`` on the manager's device, in :func:`record_buffers` order."""
    idx = _check_slots("slots", slots, manager)
    bufs = record_buffers(manager)
    return torch.stack([buf.index_select(0, idx) for _, buf in bufs])


def unpack_records(manager: CanaryManager, packed: torch.Tensor, slots: torch.Tensor) -> None:
    """Write ``packed`` (from :func:`pack_records` on the sender) at ``slots`` (the receiver's slot numbers,
    same order): the records are re-keyed by position in the transfer, not by the sender's slot numbers.

    Checks shape, dtype and device before writing anything: a packed tensor of the wrong size (a partial
    message) raises ValueError and leaves every buffer untouched."""
    idx = _check_slots("slots", slots, manager)
    if not isinstance(packed, torch.Tensor) or packed.dtype != torch.uint8:
        raise ValueError("kv-canary: packed must be the uint8 tensor pack_records returned")
    want = packed_shape(manager, int(idx.shape[0]))
    if tuple(packed.shape) != want:
        raise ValueError(f"kv-canary: packed has shape {tuple(packed.shape)}, expected {want} "
                         "(num_buffers, len(slots), 32): a partial or mismatched records message")
    src = packed.to(manager.device, non_blocking=True)
    for i, (_, buf) in enumerate(record_buffers(manager)):
        buf.index_copy_(0, idx, src[i])

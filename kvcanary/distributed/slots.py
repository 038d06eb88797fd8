"""The slot and token runs a transfer names, checked once and turned into int64 tensors on the device.

A run is a host sequence of integers or a 1-D integer tensor on any device. Slots that are written or
gathered (KV rows, records) must lie in ``[1, num_slots)``: slot 0 is the padding slot, and a slot past the
buffer would be an out-of-bounds index. Host values are checked on the host; slots already on a device cost
one read-back of their minimum and maximum (a transfer is a host event: its send or receive blocks anyway).
The receiver's verify takes slots unchecked and reads nothing back: its kernels report a slot out of range
as a violation, which is what a canary is for.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch

from kvcanary.constructors.transfer import check_entries

Entries = Sequence[int] | torch.Tensor
"""Slots or tokens of a transferred run: a host sequence of integers, or a 1-D integer tensor on any device."""


def entries(values: Entries, name: str, device: torch.device, num_slots: int | None = None) -> torch.Tensor:
    """``values`` as a 1-D int64 tensor on ``device``; a tensor is moved without a host read unless
    ``num_slots`` is given (then every slot must lie in ``[1, num_slots)``: one read-back of its bounds).
    Floats, bools and anything else that is not an integer raise the contract's ContractError naming ``name``
    (the rules: kvcanary/constructors/transfer.py)."""
    check_entries(values=values, name=name, device=device, num_slots=num_slots)
    if isinstance(values, torch.Tensor):
        return values.to(device=device, dtype=torch.int64)
    return torch.tensor([operator.index(v) for v in values], dtype=torch.int64, device=device)


def slot_index(values: Entries, name: str, num_slots: int, device: torch.device) -> torch.Tensor:
    """:func:`entries` of a run of slots: every slot in ``[1, num_slots)``."""
    return entries(values, name, device, num_slots)

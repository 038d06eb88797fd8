"""The slot and token runs a transfer names, checked once and turned into int64 tensors on the device.

A run is a host sequence of integers (each fitting in int64) or a 1-D integer tensor on any device. Slots that
are written or gathered (KV rows, records) must lie in ``[1, num_slots)`` and be distinct: slot 0 is the
padding slot, a slot past the buffer would be an out-of-bounds index, and a repeated slot would write two
positions to one place. Host values are checked on the host; a slot run already on a device is read back once
(a transfer is a host event: its send or receive blocks anyway) and every rule reads that host copy.
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
    ``num_slots`` is given (then every slot must lie in ``[1, num_slots)`` and be distinct: one read-back).
    Floats, bools, integers past int64 and anything else that is not an integer raise the contract's
    ContractError naming ``name`` (the rules: kvcanary/constructors/transfer.py)."""
    return checked_run(values, name, device, num_slots)[0]


def checked_run(values: Entries, name: str, device: torch.device,
                num_slots: int | None = None) -> tuple[torch.Tensor, list[int] | None]:
    """:func:`entries`, and (for a run of slots: ``num_slots`` given) its values as the check read them on the
    host; None for a run of tokens (a device tensor of tokens is never read back)."""
    if not isinstance(values, torch.Tensor):
        check_entries(values=values, name=name, device=device, num_slots=num_slots)
        ints = [operator.index(v) for v in values]
        return torch.tensor(ints, dtype=torch.int64, device=device), ints if num_slots is not None else None
    if num_slots is None:
        check_entries(values=values, name=name, device=device, num_slots=None)
        return values.to(device=device, dtype=torch.int64), None
    host = values.cpu()  # the one read-back of a device run (none on the CPU): every slot rule reads this copy
    check_entries(values=host, name=name, device=device, num_slots=num_slots)
    return values.to(device=device, dtype=torch.int64), [int(v) for v in host.tolist()]


def slot_index(values: Entries, name: str, num_slots: int, device: torch.device) -> torch.Tensor:
    """:func:`entries` of a run of slots: every slot in ``[1, num_slots)``, none repeated."""
    return entries(values, name, device, num_slots)

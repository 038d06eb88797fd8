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

Entries = Sequence[int] | torch.Tensor
"""Slots or tokens of a transferred run: a host sequence of integers, or a 1-D integer tensor on any device."""


def entries(values: Entries, name: str, device: torch.device) -> torch.Tensor:
    """``values`` as a 1-D int64 tensor on ``device``; a tensor is moved without a host read. Floats, bools
    and anything else that is not an integer raise ValueError naming ``name``."""
    if isinstance(values, torch.Tensor):
        if values.ndim != 1 or values.dtype.is_floating_point or values.dtype.is_complex or values.dtype == torch.bool:
            raise ValueError(f"kv-canary: {name} must be a 1-D integer tensor, got {values.dtype} of shape "
                             f"{tuple(values.shape)}")
        return values.to(device=device, dtype=torch.int64)
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ValueError(f"kv-canary: {name} must be a sequence of integers or a 1-D integer tensor, got "
                         f"{type(values).__name__}")
    out: list[int] = []
    for i, v in enumerate(values):
        if isinstance(v, bool):
            raise ValueError(f"kv-canary: {name}[{i}] must be an integer, got bool")
        try:
            out.append(operator.index(v))
        except TypeError:
            raise ValueError(f"kv-canary: {name}[{i}] must be an integer, got {type(v).__name__}") from None
    return torch.tensor(out, dtype=torch.int64, device=device)


def slot_index(values: Entries, name: str, num_slots: int, device: torch.device) -> torch.Tensor:
    """:func:`entries`, and every slot in ``[1, num_slots)`` (ValueError naming ``name`` and the range)."""
    idx = entries(values, name, device)
    if idx.numel():
        lo, hi = torch.stack(torch.aminmax(idx)).tolist()
        if lo < 1 or hi >= num_slots:
            raise ValueError(f"kv-canary: {name} must hold slots in [1, {num_slots}) (slot 0 is the padding slot), "
                             f"got values in [{lo}, {hi}]")
    return idx

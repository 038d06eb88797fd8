"""The chain link on int64 tensors, to find the record a violation row's expected hash came from.

A verify row's ``expected_aux`` is ``mix3(prev_hash, token, position)`` of the predecessor record the check
read; a write row's stored chain hash is the same link of its seed. Hashing every record of a buffer and
matching finds that record by content, without knowing the plan that named it.
"""

from __future__ import annotations

import torch

from kvcanary.hashing import ANCHOR_HASH, to_int64

_M1 = to_int64(0xBF58476D1CE4E5B9)
_M2 = to_int64(0x94D049BB133111EB)
ANCHOR_I64 = to_int64(ANCHOR_HASH)


def _srl(x: torch.Tensor, k: int) -> torch.Tensor:
    return (x >> k) & ((1 << (64 - k)) - 1)


def _splitmix64(x: torch.Tensor) -> torch.Tensor:
    x = (x ^ _srl(x, 30)) * _M1
    x = (x ^ _srl(x, 27)) * _M2
    return x ^ _srl(x, 31)


def links(records: torch.Tensor) -> torch.Tensor:
    """``mix3(prev_hash, token, position)`` of every record of an int64 ``[n, >= 4]`` view."""
    return _splitmix64(_splitmix64(_splitmix64(records[:, 2]) ^ records[:, 0]) ^ records[:, 1])


def find_link(records: torch.Tensor, value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first slot (slot 0 excluded) whose record links to ``value``, and whether one does; two device
    scalars (nothing is read back here)."""
    match = links(records) == to_int64(value)
    match[0] = False
    return torch.argmax(match.to(torch.int8)), match.any()

"""splitmix64 and mix3 on int64 tensors (uint64 arithmetic through two's-complement wrap-around)."""

from __future__ import annotations

import torch

from kvcanary.hashing import ANCHOR_HASH, to_int64

M1 = to_int64(0xBF58476D1CE4E5B9)
M2 = to_int64(0x94D049BB133111EB)
ANCHOR_I64 = to_int64(ANCHOR_HASH)


def _srl(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's >> is arithmetic)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    x = (x ^ _srl(x, 30)) * M1
    x = (x ^ _srl(x, 27)) * M2
    return x ^ _srl(x, 31)


def mix3(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return splitmix64(splitmix64(splitmix64(a) ^ b) ^ c)

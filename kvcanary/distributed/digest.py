"""A device-side digest of canary records: splitmix64 in torch int64 ops, folded over a set of slots.

Tensor-parallel ranks stamp the same (token, position, prev_hash) at the same slots; only real_kv_hash (a
fingerprint of each rank's own heads) differs. The digest covers slot, token, position and prev_hash of
every record a forward wrote, as a wrapping sum (order-free) plus a count: two int64, computed with torch
ops only (no host read), so it can run inside a captured CUDA graph.
"""

from __future__ import annotations

import torch

from kvcanary.consts import CANARY_FIELD_POSITION, CANARY_FIELD_PREV_HASH, CANARY_FIELD_TOKEN
from kvcanary.hashing import to_int64

_C1 = to_int64(0xBF58476D1CE4E5B9)
_C2 = to_int64(0x94D049BB133111EB)
_SLOT_SALT = to_int64(0x9E3779B97F4A7C15)


def _shr(x: torch.Tensor, n: int) -> torch.Tensor:
    """Logical right shift of int64 (torch's ``>>`` is arithmetic)."""
    return (x >> n) & ((1 << (64 - n)) - 1)


def splitmix64_t(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 of each int64 element (two's complement, wrapping multiplies): equals
    :func:`kvcanary.hashing.splitmix64` bit for bit."""
    x = (x ^ _shr(x, 30)) * _C1
    x = (x ^ _shr(x, 27)) * _C2
    return x ^ _shr(x, 31)


def fold_records(canary_buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """``int64 [2]``: (wrapping sum of each record's mix of slot, token, position, prev_hash; record count)
    over ``slots`` (entries <= 0, the padding slot and skipped tokens, are left out)."""
    loc = slots.to(torch.int64)
    valid = loc > 0
    idx = torch.where(valid, loc, torch.zeros_like(loc))
    rec = canary_buf.index_select(0, idx).view(torch.int64)
    h = splitmix64_t(idx ^ _SLOT_SALT)
    for f in (CANARY_FIELD_TOKEN, CANARY_FIELD_POSITION, CANARY_FIELD_PREV_HASH):
        h = splitmix64_t(h ^ rec[:, f])
    v = valid.to(torch.int64)
    return torch.stack([(h * v).sum(), v.sum()])


class DigestAccumulator:
    """Per-step digest of the records the forwards wrote: :meth:`add` after each HEAD (capturable),
    :meth:`take` once per step, outside any graph (copies the sum out and zeroes it, on the device)."""

    def __init__(self, canary_buf: torch.Tensor) -> None:
        self._buf = canary_buf
        self.acc = torch.zeros(2, dtype=torch.int64, device=canary_buf.device)

    def add(self, out_cache_loc: torch.Tensor) -> None:
        self.acc.add_(fold_records(self._buf, out_cache_loc))

    def take(self, out: torch.Tensor) -> None:
        """Copy the step's digest into ``out[:2]`` and start the next step from zero."""
        out[:2].copy_(self.acc)
        self.acc.zero_()

"""fold: the tensor-parallel digest of canary records in torch int64 ops (the reference; any device).

Per slot ``s > 0``: ``h = splitmix64(s ^ SLOT_SALT)``, then ``h = splitmix64(h ^ field)`` for token, position
and prev_hash in turn (uint64 arithmetic through int64 wrap-around); the fold is ``(Σ h, count)``, the sum
wrapping. A slot past the buffer (a corrupted index) is counted with its fields read as 0 and nothing is
read for it: no index ever leaves the buffer. No host read, no allocation that depends on device values.
"""

from __future__ import annotations

import torch

from kvcanary.consts import CANARY_FIELD_POSITION, CANARY_FIELD_PREV_HASH, CANARY_FIELD_TOKEN, CANARY_SLOT_BYTES
from kvcanary.hashing import to_int64
from kvcanary.ops.fold import FOLD, FoldLaunch
from kvcanary_backends.torch_ref._hash import splitmix64

SLOT_SALT = to_int64(0x9E3779B97F4A7C15)
"""XOR-ed into a slot number before its first splitmix64 round."""


def fold_records(canary_buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """``int64 [2]``: the fold of the records at ``slots`` (see the module docstring)."""
    loc = slots.to(torch.int64)
    valid = loc > 0
    num_slots = int(canary_buf.shape[0])
    inside = valid & (loc < num_slots)
    idx = torch.where(inside, loc, torch.zeros_like(loc))
    if num_slots:
        rows = canary_buf.index_select(0, idx).view(torch.int64)
        rec = rows * inside.to(torch.int64).unsqueeze(1)
    else:
        rec = torch.zeros(loc.shape[0], CANARY_SLOT_BYTES // 8, dtype=torch.int64, device=loc.device)
    h = splitmix64(loc ^ SLOT_SALT)
    for f in (CANARY_FIELD_TOKEN, CANARY_FIELD_POSITION, CANARY_FIELD_PREV_HASH):
        h = splitmix64(h ^ rec[:, f])
    v = valid.to(torch.int64)
    return torch.stack([(h * v).sum(), v.sum()])


@FOLD.kernel("torch_ref")
def fold(call: FoldLaunch) -> None:
    call.acc.add_(fold_records(call.canary_buf, call.slots))

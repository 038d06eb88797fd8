"""Reading and writing canary records, folding real-KV bytes, and appending ring rows."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvcanary.consts import REAL_KV_CHUNK_BYTES, FailReason, RealKvHashMode
from kvcanary.sources import RealKvSource
from kvcanary_backends.torch_ref._hash import splitmix64

# FailReason bits as plain ints, for the row tensors verify and write build
CHAIN = int(FailReason.VERIFY_CHAIN_HASH_MISMATCH)
POS = int(FailReason.VERIFY_POSITION_MISMATCH)
RKV = int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)
TOK = int(FailReason.VERIFY_TOKEN_MISMATCH)
WTOK = int(FailReason.WRITE_TOKEN_MISMATCH)
WPOS = int(FailReason.WRITE_POSITION_MISMATCH)
OOB = int(FailReason.INDEX_OUT_OF_RANGE)
ZERO = int(FailReason.ZERO_SLOT_IN_LIVE_RANGE)
WSLOT = int(FailReason.WRITE_SLOT_MISMATCH)
WOWN = int(FailReason.WRITE_SLOT_OWNER_MISMATCH)

_FOLD_CHUNK = 1 << 16  # slots folded per pass, to bound the gather's temporary memory


def records(canary_buf: torch.Tensor) -> torch.Tensor:
    """The canary buffer as int64 words ``[num_slots, stride / 8]``; fields are columns 0..3."""
    return canary_buf.view(torch.int64)


def fold_sources(
    sources: Sequence[RealKvSource], mode: int, slots: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each slot's real-KV hash and whether any source's strip for it lies outside the source tensor.

    ``slots`` must be non-negative. A strip outside its source contributes 0 to the fold (and is flagged).
    """
    n = slots.shape[0]
    acc = torch.zeros(n, dtype=torch.int64, device=slots.device)
    oob = torch.zeros(n, dtype=torch.bool, device=slots.device)
    if mode == RealKvHashMode.NONE or not sources or n == 0:
        return acc, oob
    for src in sources:
        words = src.tensor.view(torch.uint8).view(torch.int64)  # [rows, row_bytes / 8]
        flat = words.reshape(-1)
        rows, row_words = words.shape
        eff = REAL_KV_CHUNK_BYTES if mode == RealKvHashMode.PARTIAL else src.read_bytes
        nwords = eff // 8
        row = torch.div(slots, src.page_size, rounding_mode="floor")
        valid = row < rows
        base = torch.where(valid, row, 0) * row_words + (slots % src.page_size) * (src.num_bytes_per_token // 8)
        h = torch.zeros(n, dtype=torch.int64, device=slots.device)
        for start in range(0, n, _FOLD_CHUNK):
            b = base[start : start + _FOLD_CHUNK]
            hc = torch.zeros_like(b)
            for w in range(nwords):
                hc = splitmix64(hc ^ flat[b + w])
            h[start : start + _FOLD_CHUNK] = hc
        h = torch.where(valid, h, 0)
        acc = splitmix64(acc ^ h)
        oob |= ~valid
    return acc, oob


def append_rows(ring: torch.Tensor, write_index: torch.Tensor, rows: torch.Tensor, keep: torch.Tensor) -> None:
    """Append ``rows[keep]`` (in order) to the fill-once ring; the index counts every kept row.

    Sync-free: positions come from a cumulative sum on the device; rows past capacity go to a dummy row.
    """
    if rows.shape[0] == 0:
        return
    cap = ring.shape[0]
    seq = write_index.to(torch.int64) + torch.cumsum(keep.to(torch.int64), 0) - 1
    stored = keep & (seq >= 0) & (seq < cap)
    target = torch.where(stored, seq, cap)
    ext = torch.cat([ring, ring.new_zeros(1, ring.shape[1])])
    ext.index_copy_(0, target, rows)
    ring.copy_(ext[:cap])
    write_index.add_(keep.sum().to(write_index.dtype))

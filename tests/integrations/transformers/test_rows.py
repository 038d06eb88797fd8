"""The sweep's entries from the mirrored block tables: one per token of each complete, known block."""

from __future__ import annotations

import random
from typing import Any

import torch

from kvcanary.integrations.transformers.rows import BlockInfo, RequestRows


class _Layout:
    page = 16
    stride = 24  # rows of a block in the cache's token view (a block's tokens need not fill its stride)


def _rows() -> RequestRows:
    layout: Any = _Layout()
    return RequestRows(layout, num_rows=2, max_len=8, device=torch.device("cpu"))


def test_sweep_entries_cover_every_token_of_known_blocks_in_order() -> None:
    rows = _rows()
    rng = random.Random()
    known = rng.sample(range(1, 200), 40)
    for b in known:
        rows.blocks_info[b] = BlockInfo(first_position=16 * rng.randrange(0, 50), prev_slot=rng.randrange(-1, 5000))
    asked = set(known[:30]) | {500, 501}  # two blocks without an entry (incomplete): skipped
    got = rows.sweep_entries(asked)
    got.validate()
    want: list[tuple[int, int, int]] = []
    for b in sorted(asked):
        info = rows.blocks_info.get(b)
        if info is None:
            continue
        for o in range(16):
            slot = b * 24 + o
            want.append((slot, info.first_position + o, info.prev_slot if o == 0 else slot - 1))
    assert list(zip(got.slots.tolist(), got.positions.tolist(), got.prev_slots.tolist(), strict=True)) == want


def test_sweep_entries_of_nothing_is_empty() -> None:
    got = _rows().sweep_entries({3, 4})
    got.validate()
    assert len(got) == 0

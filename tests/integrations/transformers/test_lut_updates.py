"""The sliding group's ``full slot -> ring slot`` updates, built with numpy, against the per-request tensor
formulation they replace: the same entries in the same order, over randomized windows, pages, chunks and
block tables."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from kvcanary.integrations.transformers.pool import PoolState


def _reference(sw: Any, rows: dict[str, torch.Tensor], rids: list[str], pasts: list[int],
               queries: list[int]) -> tuple[list[int], list[int]]:
    """The tensor formulation: per request, its positions' ring slots, masked where the step overwrites them
    (0) or the ring does not keep them (-1)."""
    keys: list[torch.Tensor] = []
    vals: list[torch.Tensor] = []
    w = sw.window
    for rid, past, q in zip(rids, pasts, queries, strict=True):
        lo = max(0, past - (w - 1))
        p = torch.arange(lo, past + q, dtype=torch.int64)
        blocks = torch.tensor(sw.block_table.get(rid, []), dtype=torch.int64)
        if blocks.numel() == 0:
            continue
        ring = p % w
        slot = blocks[(ring // sw.page).clamp(max=blocks.numel() - 1)] * sw.stride + ring % sw.page
        slot = torch.where((p < past) & (p < past - w + q), 0, slot)
        slot = torch.where((p >= past) & (p < past + q - w), -1, slot)
        keys.append(rows[rid][lo : past + q].to(torch.int64))
        vals.append(slot)
    if not keys:
        return [], []
    return torch.cat(keys).tolist(), torch.cat(vals).tolist()


def test_numpy_updates_equal_the_tensor_formulation() -> None:
    rng = random.Random(3611)
    for _ in range(200):
        window = rng.randrange(2, 40)
        page = rng.choice((1, 2, 4, 8, 16))
        nblocks = -(-window // page)
        n = rng.randrange(0, 6)
        rids = [f"r{i}" for i in range(n)]
        table = {r: rng.sample(range(1, 500), nblocks) for r in rids if rng.random() < 0.85}
        if rids and rng.random() < 0.2:
            table[rids[0]] = []  # a request holding no ring block yet
        pasts = [rng.randrange(0, 120) for _ in rids]
        queries = [rng.choice((1, 1, 2, 5, window, window + 3, 50)) for _ in rids]
        max_len = 200
        host = torch.randint(0, 10**6, (n + 3, max_len), dtype=torch.int32)  # row 0 padding, two spare rows
        order = rng.sample(range(1, n + 3), n)
        rows = {r: host[i] for r, i in zip(rids, order, strict=True)}
        sw = SimpleNamespace(window=window, page=page, stride=page + rng.randrange(0, 3), block_table=table)
        fake: Any = SimpleNamespace(layout=SimpleNamespace(sliding=sw),
                                    rows=SimpleNamespace(row_of=dict(zip(rids, order, strict=True)),
                                                         host_array=host.numpy))
        out = np.full(4096, -7, dtype=np.int64)
        m = PoolState._lut_updates(fake, rids, pasts, queries, out)
        want_k, want_v = _reference(sw, rows, rids, pasts, queries)
        assert m == len(want_k)
        assert out[:m].tolist() == want_k and out[m : 2 * m].tolist() == want_v
        assert (out[2 * m :] == -7).all()  # nothing written past the entries

"""How the model's layers reach the pools: KV writes at ``out_cache_loc`` and per-row key gathers.

Full layers gather a row's keys run by run (a contiguous run of slots is one slice of the pool instead of
an index gather); sliding-window layers translate the row's window through the host LUT mirror.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.demo.engine.faults import Fault, FaultInjector
from kvcanary.demo.engine.kv_pool import KvPool, ReqToTokenPool, SwaPool
from kvcanary.demo.engine.model import KvAccess, RowMeta

_MAX_RUNS = 8  # beyond this many runs an index gather is cheaper


def slot_runs(slots: list[int]) -> list[tuple[int, int]]:
    """``[(first_slot, length), ...]`` of consecutive ascending slots."""
    runs: list[tuple[int, int]] = []
    for s in slots:
        if runs and runs[-1][0] + runs[-1][1] == s:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((s, 1))
    return runs


@dataclass(frozen=True, kw_only=True, eq=False)
class PoolKv(KvAccess):
    """KvAccess over one engine's pools. ``layer_map[layer] = (is_swa, index in its pool)``."""

    pool: KvPool
    swa: SwaPool | None
    r2t: ReqToTokenPool
    layer_map: list[tuple[bool, int]]
    window: int
    faults: FaultInjector

    def write(self, layer: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        is_swa, idx = self.layer_map[layer]
        if is_swa:
            assert self.swa is not None
            self.swa.kv.write(idx, self.swa.lut[loc], k, v)
        else:
            self.pool.write(idx, loc, k, v)

    def gather(self, layer: int, row: RowMeta, key_scale: float) -> tuple[torch.Tensor, torch.Tensor, int]:
        is_swa, idx = self.layer_map[layer]
        end = row.prefix + row.extend
        if is_swa:
            assert self.swa is not None
            first = max(0, row.prefix - self.window + 1)
            full = self.r2t.read(row.row, first, end)
            at = torch.tensor([self.swa.host_lut[f] for f in full], dtype=torch.int64, device=self.pool.k[0].device)
            return self.swa.kv.k[idx][at] * key_scale, self.swa.kv.v[idx][at], first
        slots = self.r2t.read(row.row, 0, end)
        kbuf, vbuf = self.pool.k[idx], self.pool.v[idx]
        runs = slot_runs(slots)
        if len(runs) > _MAX_RUNS:
            at = torch.tensor(slots, dtype=torch.int64, device=kbuf.device)
            return kbuf[at] * key_scale, vbuf[at], 0
        in_place = row.prefix > 0 and self.faults.fire(
            Fault.KV_FLIP_USED, f"layer {layer} keys of req_to_token row {row.row} scaled in place")
        ks: list[torch.Tensor] = []
        for a, n in runs:
            view = kbuf[a : a + n]
            if in_place:
                ks.append(view.mul_(key_scale))  # BUG: scales the cached keys themselves, not a copy
            else:
                ks.append(view * key_scale)
        vs = [vbuf[a : a + n] for a, n in runs]
        return torch.cat(ks), torch.cat(vs), 0

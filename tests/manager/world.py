"""A toy pool for manager tests: requests as explicit slot lists, forwards built by hand."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kvcanary.consts import PoolKind, RealKvHashMode
from kvcanary.manager import (
    CanaryBatch,
    CanaryCapacities,
    CanaryConfig,
    CanaryManager,
    ExpectedTokens,
    KvPoolSpec,
    PoolGroupSpec,
    SweepEntries,
)

NUM_SLOTS = 64
ROWS = 6
MAX_LEN = 32


def t64(x: list[int]) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.int64)


@dataclass
class Req:
    row: int
    tokens: list[int]
    slots: list[int] = field(default_factory=list)  # slots of the positions written so far


@dataclass
class World:
    """K/V layer-0 buffers, req_to_token, optional SWA pool + LUT, and a manager over them."""

    manager: CanaryManager
    k: torch.Tensor
    v: torch.Tensor
    r2t: torch.Tensor
    lut: torch.Tensor | None = None
    swa_k: torch.Tensor | None = None
    offset: int = 0

    def forward(self, reqs: list[tuple[Req, int, int]], *, tokens_override: dict[int, list[int]] | None = None,
                positions_override: dict[int, list[int]] | None = None, pad_rows: int = 0) -> CanaryBatch:
        """One forward: for each (req, prefix, extend) stamp positions [prefix, prefix+extend) at the
        slots already in ``req.slots`` (the caller allocates). Padding rows (row 0, slot 0) go last."""
        batch = self.build(reqs, tokens_override=tokens_override, positions_override=positions_override,
                           pad_rows=pad_rows)
        with self.manager.forward(batch):
            self.write_kv(batch.out_cache_loc.tolist())
        return batch

    def build(self, reqs: list[tuple[Req, int, int]], *, tokens_override: dict[int, list[int]] | None = None,
              positions_override: dict[int, list[int]] | None = None, pad_rows: int = 0) -> CanaryBatch:
        """The batch :meth:`forward` runs (``req_to_token`` filled for it), without running it."""
        rows, pre, ext, ids, pos, loc = [], [], [], [], [], []
        exp_rows: list[list[int]] = []
        for req, p, e in reqs:
            for i in range(p + e):
                self.r2t[req.row, i] = req.slots[i]
            rows.append(req.row)
            pre.append(p)
            ext.append(e)
            toks = (tokens_override or {}).get(req.row, req.tokens)
            ps = (positions_override or {}).get(req.row, list(range(p, p + e)))
            for j in range(e):
                ids.append(toks[p + j + self.offset] if p + j + self.offset < len(toks) else 0)
                pos.append(ps[j])
                loc.append(req.slots[p + j])
            exp_rows.append(req.tokens)
        for _ in range(pad_rows):
            rows.append(0)
            pre.append(0)
            ext.append(1)
            ids.append(0)
            pos.append(0)
            loc.append(0)
            exp_rows.append([])
        dev = self.k.device
        batch = CanaryBatch(req_pool_indices=t64(rows).to(dev), prefix_lens=t64(pre).to(dev),
                            extend_lens=t64(ext).to(dev), input_ids=t64(ids).to(dev), positions=t64(pos).to(dev),
                            out_cache_loc=t64(loc).to(dev),
                            expected_tokens=ExpectedTokens.from_lists(exp_rows))
        return batch

    def write_kv(self, loc: list[int]) -> None:
        """The "model": writes deterministic K/V bytes for each written slot."""
        for s in loc:
            if 0 < s < self.k.shape[0]:
                g = torch.Generator().manual_seed(1000 + s)
                self.k[s] = torch.randn(self.k.shape[1:], generator=g)
                self.v[s] = torch.randn(self.v.shape[1:], generator=g)
                if self.swa_k is not None and self.lut is not None:
                    self.swa_k[int(self.lut[s])] = self.k[s]

    def step(self) -> None:
        self.manager.end_step()

    def events(self) -> list[tuple[str, int, int]]:
        """(tag, slot, reason bits) of every violation, after a synchronous flush."""
        self.manager.flush()
        return [(e.violation.tag_name, e.violation.slot_idx, e.violation.fail_reason_bits)
                for e in self.manager.events]


def make_world(*, mode: RealKvHashMode = RealKvHashMode.ALL, enable_v: bool = True, verify_token: bool = True,
               sweep: int = 0, swa_window: int = 0, offset: int = 0, config: CanaryConfig | None = None,
               capacities: CanaryCapacities | None = None, device: str = "cpu") -> World:
    k = torch.zeros(NUM_SLOTS, 2, 8, device=device)
    v = torch.zeros(NUM_SLOTS, 2, 8, device=device)
    r2t = torch.zeros(ROWS, MAX_LEN, dtype=torch.int32, device=device)
    groups = [PoolGroupSpec(kind=PoolKind.FULL, k_layer0=k, v_layer0=v)]
    lut = swa_k = None
    if swa_window:
        lut = torch.zeros(NUM_SLOTS, dtype=torch.int64)
        lut[1:] = torch.arange(NUM_SLOTS - 1, 0, -1)  # a non-identity translation
        swa_k = torch.zeros(NUM_SLOTS, 2, 8)
        swa_v = torch.zeros(NUM_SLOTS, 2, 8)
        groups.append(PoolGroupSpec(kind=PoolKind.SWA, k_layer0=swa_k, v_layer0=swa_v, swa_window_size=swa_window,
                                    full_to_swa_index_mapping=lut))
    cfg = config or CanaryConfig(real_kv_mode=mode, enable_v=enable_v, enable_verify_token=verify_token,
                                 sweep_interval=sweep, health_warmup_steps=3, health_every=1)
    caps = capacities or CanaryCapacities.from_engine(pool_slot_count=NUM_SLOTS, max_batch_size=8, req_rows=ROWS,
                                                      max_tokens_per_forward=MAX_LEN, max_context_len=MAX_LEN)
    mgr = CanaryManager.attach(pool=KvPoolSpec(groups=tuple(groups), req_to_token=r2t,
                                               kv_token_id_vs_position_offset=offset), capacities=caps, config=cfg)
    mgr.mark_init_finished()
    return World(mgr, k, v, r2t, lut, swa_k, offset)


def chain_entries(reqs: list[Req]) -> SweepEntries:
    """Sweep entries for each request's slots as one chain (what a radix walker would emit)."""
    slots, pos, prev = [], [], []
    for r in reqs:
        for i, s in enumerate(r.slots):
            slots.append(s)
            pos.append(i)
            prev.append(r.slots[i - 1] if i else -1)
    return SweepEntries.from_lists(slots, pos, prev)

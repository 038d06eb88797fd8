"""Building one forward: flat token arrays grouped by row, CUDA-graph padding, and its two views (the
model's input and the canary's engine-neutral :class:`~kvcanary.manager.CanaryBatch`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kvcanary.demo.engine.faults import Fault, FaultInjector
from kvcanary.demo.engine.model import ModelInput, RowMeta
from kvcanary.demo.engine.requests import Request
from kvcanary.manager.batch import CanaryBatch, ExpectedTokens


@dataclass
class RowWork:
    """One batch row: ``req`` None is a padding row (req_to_token row 0, slot 0)."""

    req: Request | None
    prefix: int
    extend: int
    input_ids: Sequence[int]
    positions: list[int]
    locs: list[int]

    @property
    def row(self) -> int:
        return self.req.row if self.req is not None else 0


@dataclass
class Forward:
    rows: list[RowWork]
    model_input: ModelInput
    canary: CanaryBatch
    row_starts: list[int]


class GraphInputs:
    """The static input buffers of the captured decode graphs (one set, sliced per bucket). After a replay
    the padded tail is reset to padding values, so padding rows write the dummy slot 0."""

    def __init__(self, max_tokens: int, device: torch.device) -> None:
        self._buf = torch.zeros(3, max_tokens, dtype=torch.int64, device=device)  # ids, positions, slots
        self.ids, self.pos, self.loc = self._buf[0], self._buf[1], self._buf[2]

    def fill(self, ids: list[int], pos: list[int], locs: list[int], padded: int,
             faults: FaultInjector) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = len(ids)
        self._buf[:, :n].copy_(torch.tensor([ids, pos, locs], dtype=torch.int64))  # one host-to-device copy
        self.ids[n:padded] = 0
        self.pos[n:padded] = 0
        stale = [int(x) for x in self.loc[n:padded].tolist()] if faults.armed(Fault.PADDING_ROW_WRITE) else []
        if not (any(stale) and faults.fire(Fault.PADDING_ROW_WRITE, f"padding rows kept out_cache_loc {stale}")):
            self.loc[n:padded] = 0  # (skipped by the bug: padding rows keep the previous replay's slots)
        return self.ids[:padded], self.pos[:padded], self.loc[:padded]


def _bucket(n: int, buckets: tuple[int, ...]) -> int | None:
    return next((b for b in buckets if b >= n), None)


def build_forward(rows: list[RowWork], *, device: torch.device, buckets: tuple[int, ...] = (),
                  graph: GraphInputs | None = None, faults: FaultInjector | None = None) -> Forward:
    """Lay ``rows`` out flat (row order), pad to a graph bucket when ``graph`` is given, and describe it."""
    faults = faults if faults is not None else FaultInjector()
    rows = list(rows)
    real_tokens = sum(r.extend for r in rows)
    per_row = rows[0].extend if rows else 1
    bucket = _bucket(len(rows), buckets) if graph is not None else None
    if bucket is not None:
        for _ in range(bucket - len(rows)):
            rows.append(RowWork(None, 0, per_row, [0] * per_row, [0] * per_row, [0] * per_row))
    ids = [t for r in rows for t in r.input_ids]
    pos = [p for r in rows for p in r.positions]
    locs = [s for r in rows for s in r.locs]
    row_ids = [r.row for r in rows]
    meta = [*row_ids, *(r.prefix for r in rows), *(r.extend for r in rows)]
    bs = len(rows)
    if graph is not None and bucket is not None:
        ids_t, pos_t, loc_t = graph.fill(ids[:real_tokens], pos[:real_tokens], locs[:real_tokens], len(ids), faults)
        dev = torch.tensor(meta, dtype=torch.int64).to(device)
    else:  # the rows and the tokens in one host-to-device copy
        dev = torch.tensor(meta + ids + pos + locs, dtype=torch.int64).to(device)
        n = len(ids)
        ids_t, pos_t, loc_t = (dev[3 * bs + i * n : 3 * bs + (i + 1) * n] for i in range(3))
    starts, metas, at = [], [], 0
    for r in rows:
        starts.append(at)
        metas.append(RowMeta(r.row, r.prefix, r.extend, at))
        at += r.extend
    toks = [r.req.tokens if r.req is not None else () for r in rows]
    expected = ExpectedTokens(flat=torch.tensor(list(itertools.chain.from_iterable(toks)), dtype=torch.int64),
                              lens=torch.tensor([len(t) for t in toks], dtype=torch.int64))
    canary = CanaryBatch(req_pool_indices=dev[:bs], prefix_lens=dev[bs : 2 * bs], extend_lens=dev[2 * bs : 3 * bs],
                         input_ids=ids_t, positions=pos_t, out_cache_loc=loc_t, expected_tokens=expected)
    return Forward(rows, ModelInput(ids_t, pos_t, loc_t, tuple(metas)), canary, starts)

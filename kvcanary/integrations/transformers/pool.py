"""The canary state of one paged cache: its manager, its request-row mirror, and the step's mapping.

:class:`PoolState` is built at the first step that sees a cache (the cache exists only once transformers
has sized it) and turns each step into a :class:`~kvcanary.manager.CanaryBatch`: the rows, prefix and
extend lengths and write slots staged in one host-to-device copy, the engine's own token and position
tensors, and, for a sliding-window group, the full-slot to ring-slot table refreshed from the engine's ring.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import torch

from kvcanary.consts import PoolKind
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.integrations.transformers.guard import TfGuard
from kvcanary.integrations.transformers.layout import read_layout
from kvcanary.integrations.transformers.rows import RequestRows
from kvcanary.manager import (
    CanaryBatch,
    CanaryCapacities,
    CanaryConfig,
    CanaryManager,
    KvPoolSpec,
    PoolGroupSpec,
    SweepEntries,
)


@dataclass(frozen=True)
class ScheduledRequest:
    """One request of a step, as the engine scheduled it: tokens already cached, tokens this step."""

    request_id: str
    past_length: int
    query_length: int



class PoolState:
    """The manager and the row mirror of one paged cache (one generate_batch run or persistent manager)."""

    def __init__(self, runner: Any, *, config: CanaryConfig, max_requests: int | None,
                 max_context_len: int | None) -> None:
        cache = runner.cache
        self.cache = cache
        self.layout = read_layout(cache)
        lay = self.layout
        dev = lay.k_rows.device
        max_reqs = int(runner.inputs_and_outputs.max_requests_per_batch)
        rows = max_requests or (2 * max_reqs + 1)
        model_len = getattr(cache.config, "max_position_embeddings", None)
        max_len = max_context_len or min(lay.num_token_slots, int(model_len or lay.num_token_slots))
        self.rows = RequestRows(lay, num_rows=rows + 1, max_len=max_len, device=dev)
        caps = CanaryCapacities.from_engine(pool_slot_count=lay.num_token_slots, max_batch_size=max_reqs,
                                            req_rows=rows + 1, max_tokens_per_forward=int(cache.max_batch_tokens),
                                            max_context_len=max_len)
        groups = [PoolGroupSpec(kind=PoolKind.FULL, k_layer0=lay.k_rows, v_layer0=lay.v_rows)]
        self.lut: torch.Tensor | None = None
        lut_room = 0
        if lay.sliding is not None:
            sw = lay.sliding
            # full slot -> ring slot, refreshed every step for the positions the step reads and writes
            self.lut = torch.zeros(int(lay.k_rows.shape[0]), dtype=torch.int64, device=dev)
            groups.append(PoolGroupSpec(kind=PoolKind.SWA, k_layer0=sw.k_rows, v_layer0=sw.v_rows,
                                        swa_window_size=sw.window - 1, full_to_swa_index_mapping=self.lut))
            lut_room = 2 * (caps.write_req_capacity * (sw.window - 1) + caps.write_token_capacity)
        if lay.sliding is not None:  # transformers shares and caches no block of a model with a sliding group
            config = dataclasses.replace(config, sweep_interval=0)
        self.manager = CanaryManager.attach(
            pool=KvPoolSpec(groups=tuple(groups), req_to_token=self.rows.device_table), capacities=caps,
            config=config)
        self.swept = 0
        self.sweep_entry_seconds = 0.0  # host time building the sweeps' entries (part of end_step)
        if config.sweep_interval:
            self.manager.set_sweep_source(self._sweep_entries)
        self.manager.mark_init_finished()  # no warmup batches: graphs and compile are refused
        self.guard: TfGuard | None = None
        """The isolate policy's journal feeder and adapter (``config.policy`` ISOLATE only)."""
        if config.policy is ViolationPolicy.ISOLATE:
            self.guard = TfGuard(self.manager, lay)
        self._staging = torch.zeros(caps.write_req_capacity * 3 + caps.write_token_capacity + lut_room,
                                    dtype=torch.int64,
                                    pin_memory=dev.type == "cuda")
        self._device_in = torch.zeros_like(self._staging, device=dev)

    def _sweep_entries(self) -> SweepEntries:
        t0 = time.perf_counter()
        entries = self.rows.due_entries(self.layout.cached_blocks())
        self.sweep_entry_seconds += time.perf_counter() - t0
        self.swept += len(entries)
        return entries

    def batch(self, reqs: tuple[ScheduledRequest, ...], batch_data: dict[str, Any]) -> CanaryBatch:
        """The step as a CanaryBatch: rows, prefix and extend lengths (and the write slots, when the engine
        passes no ``write_index`` of its own) staged in one copy; token ids and positions are the engine's own
        input tensors. Per request only its row is looked up (re-mapped when its block list changed); the
        write slots are gathered from the synced rows with tensor ops."""
        rows = self.rows
        rows.release_finished()
        bs = len(reqs)
        past = [r.past_length for r in reqs]
        query = [r.query_length for r in reqs]
        meta = rows.sync_many([r.request_id for r in reqs], [r.past_length + r.query_length for r in reqs])
        ntok = sum(query)
        write_index = batch_data.get("write_index") or []
        idx = self.layout.index
        engine_loc = write_index[idx][:ntok] if len(write_index) > idx and batch_data.get("block_table") is None \
            else None
        if engine_loc is None or engine_loc.shape[0] != ntok:
            engine_loc = None
        host = self._staging
        meta += past
        meta += query
        host[: 3 * bs] = torch.tensor(meta, dtype=torch.int64)
        at = 3 * bs
        if engine_loc is None:  # the engine's own write slots are not at hand: the rows' slots (the same)
            host[at : at + ntok] = rows.locs(meta[:bs], past, query)
            at += ntok
        m = self._lut_updates(reqs, host[at:]) if self.lut is not None else 0
        end = at + 2 * m
        dev = self._device_in[:end]
        dev.copy_(host[:end], non_blocking=True)
        if self.lut is not None and m:
            self.lut.index_copy_(0, dev[at : at + m], dev[at + m : end])
        return CanaryBatch(req_pool_indices=dev[:bs], prefix_lens=dev[bs : 2 * bs], extend_lens=dev[2 * bs : 3 * bs],
                           input_ids=batch_data["input_ids"][0, :ntok], positions=batch_data["position_ids"][0, :ntok],
                           out_cache_loc=engine_loc if engine_loc is not None else dev[3 * bs : 3 * bs + ntok])

    def _lut_updates(self, reqs: tuple[ScheduledRequest, ...], out: torch.Tensor) -> int:
        """Stage ``full slot -> ring slot`` for each request's verified window and new tokens, from the
        engine's sliding block table as it is now; return the number of entries (indices, then values).

        The window is the ``window - 1`` positions before the step (what the step's attention reads).
        Positions whose ring slot this step's own tokens overwrite (a chunk longer than one token) map to
        slot 0, which the verify skips; new tokens the ring does not keep (a chunk longer than the window)
        map to -1, which the write skips."""
        sw = self.layout.sliding
        assert sw is not None
        keys: list[torch.Tensor] = []
        vals: list[torch.Tensor] = []
        w = sw.window
        for r in reqs:
            past, q = r.past_length, r.query_length
            lo = max(0, past - (w - 1))
            p = torch.arange(lo, past + q, dtype=torch.int64)
            blocks = torch.tensor(sw.block_table.get(r.request_id, []), dtype=torch.int64)
            if blocks.numel() == 0:
                continue
            ring = p % w
            slot = blocks[(ring // sw.page).clamp(max=blocks.numel() - 1)] * sw.stride + ring % sw.page
            slot = torch.where((p < past) & (p < past - w + q), 0, slot)
            slot = torch.where((p >= past) & (p < past + q - w), -1, slot)
            keys.append(self.rows.row_tensor(r.request_id)[lo : past + q].to(torch.int64))
            vals.append(slot)
        if not keys:
            return 0
        k, v = torch.cat(keys), torch.cat(vals)
        m = int(k.numel())
        out[:m] = k
        out[m : 2 * m] = v
        return m

"""The canary state of one paged cache: its manager, its request-row mirror, and the step's mapping.

:class:`PoolState` is built at the first step that sees a cache (the cache exists only once transformers
has sized it) and turns each step into a :class:`~kvcanary.manager.CanaryBatch`: the rows, prefix and
extend lengths and write slots staged in one host-to-device copy, the engine's own token and position
tensors, and, for a sliding-window group, the full-slot to ring-slot table refreshed from the engine's ring.
The host values go into the manager's pinned inputs (:meth:`~kvcanary.manager.CanaryManager.pinned_inputs`)
through an int64 memoryview (a quiet decode step rewrites only the prefix lengths of a buffer that holds the step's
rows and extend lengths): the map issues no CUDA call of its own unless a sliding group's table must be refreshed.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
import time
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kvcanary.consts import PoolKind
from kvcanary.extensions import write_owner_on
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


@dataclass(frozen=True)
class _Views:
    """The device slices of one step shape, made once (a slice is a dispatched op each time it is made)."""

    rows: torch.Tensor
    prefix: torch.Tensor
    extend: torch.Tensor
    locs: torch.Tensor


_Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]
"""A step's flat token ids and positions and the engine's write slots (None: none that fit)."""


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
        """The journal feeder and the isolate policy's adapter: with ``config.policy`` ISOLATE, and with the
        write-time owner check on (the manager's owner map gets slots back through the journal)."""
        if config.policy is ViolationPolicy.ISOLATE or write_owner_on(config.extensions):
            self.guard = TfGuard(self.manager, lay, self.rows)
        self._pinned = self.manager.pinned_inputs(caps.write_req_capacity * 3 + caps.write_token_capacity
                                                  + lut_room)
        """The step's rows, lengths, write slots and LUT entries: written with numpy into a pinned host buffer,
        copied in by the manager's HEAD (inside its staged graph for the usual decode step)."""
        self._device_in = self._pinned.device
        self._views: dict[tuple[int, int], _Views] = {}  # (bs, tokens) -> its slices
        self._flats: dict[tuple[object, ...], torch.Tensor] = {}  # an engine input's memory and shape -> flat view
        self._inputs_of: dict[tuple[object, ...], _Inputs] = {}
        """The engine's input tensors' memory, shapes, strides, dtypes and devices (one step's key) -> the flat
        ids and positions and the kept write slots (:meth:`_inputs`)."""
        self._host_views: dict[int, tuple[np.ndarray[Any, np.dtype[np.int64]], memoryview]] = {}
        """Per pinned host buffer: an int64 memoryview of it. The rows and lengths go in as an ``array('q')``
        through it, not as a list through numpy's conversion, whose code a step finds cold after the forward."""
        self._held: dict[int, tuple[object, list[int]]] = {}
        """Per pinned host buffer: the rows' sync record and the extend lengths it holds (the rows are those of
        that record): a step with the same record and lengths rewrites only the prefix lengths there."""
        self._last: tuple[tuple[torch.Tensor, ...], CanaryBatch] | None = None
        """The previous step's batch and its tensors: a step made of the very same tensor objects (same memory,
        shapes, dtypes: the cached views above) reuses it rather than build and check an identical one."""

    def _sweep_entries(self) -> SweepEntries:
        t0 = time.perf_counter()
        entries = self.rows.due_entries(self.layout.cached_blocks())
        self.sweep_entry_seconds += time.perf_counter() - t0
        self.swept += len(entries)
        return entries

    def batch(self, rids: list[str], past: list[int], query: list[int], batch_data: dict[str, Any], *,
              written: list[int]) -> CanaryBatch:
        """The step as a CanaryBatch: rows, prefix and extend lengths (and the write slots, when the engine
        passes no ``write_index`` of its own) written into the manager's pinned inputs, copied in by its HEAD;
        token ids and positions are the engine's own input tensors. Per request only its row is looked up
        (re-mapped when its block list changed); the write slots are gathered from the synced rows with tensor
        ops. ``written``: each request's ``past + query`` (the engine's position offsets, as read)."""
        rows = self.rows
        rows.release_finished()
        bs = len(rids)
        meta = rows.sync_many(rids, written)
        if self.guard is not None:  # the journal: what the syncs changed
            t0 = time.perf_counter()
            self.guard.observe(rids, past, query)
            self.guard.seconds += time.perf_counter() - t0
        ntok = sum(query)
        ids, pos, engine_loc = self._inputs(batch_data, ntok)
        pinned = self._pinned
        host = pinned.host()  # the step's pinned buffer: never one a queued copy may still read
        view = self._host_views.get(pinned.index)
        if view is None or view[0] is not host:
            view = self._host_views[pinned.index] = (host, host.data.cast("B").cast("q"))
        synced = rows.synced
        held = self._held.get(pinned.index)
        if held is not None and held[0] is synced and held[1] == query:
            view[1][bs : 2 * bs] = array("q", past)  # rows and extend lengths as held there: only the prefix moved
        else:
            view[1][: 3 * bs] = array("q", meta + past + query)
            self._held[pinned.index] = (synced, list(query))  # once written (a value past int64 raises first)
        at = 3 * bs
        if engine_loc is None:  # the engine's own write slots are not at hand: the rows' slots (the same)
            host[at : at + ntok] = rows.locs(meta, past, query).numpy()
            at += ntok
        m = self._lut_updates(rids, past, query, host[at:]) if self.lut is not None else 0
        end = at + 2 * m
        pinned.commit(end)  # the manager's HEAD copies it in, before anything reads the device buffer
        v = self._views.get((bs, ntok))
        if v is None:
            if len(self._views) >= 256:  # many prefill shapes: start over rather than grow without end
                self._views.clear()
            v = self._views[(bs, ntok)] = self._slices(bs, ntok)
        if self.lut is not None and m:  # the LUT's entries are read here: the copy cannot wait for the HEAD
            pinned.flush()
            dev = self._device_in
            self.lut.index_copy_(0, dev[at : at + m], dev[at + m : end])
        parts = (v.rows, v.prefix, v.extend, ids, pos, engine_loc if engine_loc is not None else v.locs)
        last = self._last
        if last is not None and all(map(operator.is_, parts, last[0])):
            return last[1]  # the same tensors as the previous step's (the usual decode step): its checked batch
        batch = CanaryBatch(req_pool_indices=parts[0], prefix_lens=parts[1], extend_lens=parts[2],
                            input_ids=parts[3], positions=parts[4], out_cache_loc=parts[5])
        self._last = (parts, batch)
        return batch

    def _inputs(self, batch_data: dict[str, Any], ntok: int) -> _Inputs:
        """The engine's flat token ids and positions (int32 in transformers: not widened here, since a kept batch's
        staging copy runs inside the manager's staged HEAD graph, where the widening costs the host nothing) and
        the engine's own write slots of the full group (None where it passes none that fit). What
        the engine inputs' memory, shapes, strides, dtypes and devices give is looked up once per step (the
        engine hands fresh views of its static buffers), not once per tensor."""
        ids_in, pos_in = batch_data["input_ids"], batch_data["position_ids"]
        write_index = batch_data.get("write_index") or []
        idx = self.layout.index
        loc_in = write_index[idx] if len(write_index) > idx and batch_data.get("block_table") is None else None
        key = (ntok, ids_in.data_ptr(), ids_in.shape, ids_in.stride(), ids_in.dtype, ids_in.device,
               pos_in.data_ptr(), pos_in.shape, pos_in.stride(), pos_in.dtype, pos_in.device,
               None if loc_in is None else (loc_in.data_ptr(), loc_in.shape, loc_in.stride(), loc_in.dtype,
                                            loc_in.device))
        known = self._inputs_of.get(key)
        if known is None:
            loc = loc_in
            if loc is not None and loc.shape[0] != ntok:
                loc = loc[:ntok] if loc.shape[0] > ntok else None
            if loc is not None:
                loc = self._same(loc)
            ids, pos = self._flat(ids_in, ntok), self._flat(pos_in, ntok)
            if len(self._inputs_of) >= 64:
                self._inputs_of.clear()
            known = self._inputs_of[key] = (ids, pos, loc)
        return known

    def _flat(self, t: torch.Tensor, ntok: int) -> torch.Tensor:
        """The engine's ``(1, tokens)`` input as its flat first ``ntok``. The engine hands a fresh view of its
        static buffer each step: the flat view made for the same memory, shape and strides is reused (it holds
        that memory, so the same address is the same buffer), else one is made (one or two ops)."""
        key = (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device, ntok)
        flat = self._flats.get(key)
        if flat is None:
            if len(self._flats) >= 64:
                self._flats.clear()
            row = t[0]
            flat = self._flats[key] = row if row.shape[0] == ntok else row[:ntok]
        return flat

    def _same(self, t: torch.Tensor) -> torch.Tensor:
        """``t``, or the view made earlier of the same memory with the same shape, strides and dtype (the engine
        hands a fresh view of its static buffer each step; a kept one lets the step's batch be reused)."""
        key = ("same", t.data_ptr(), t.shape, t.stride(), t.dtype, t.device)
        kept = self._flats.get(key)
        if kept is None:
            if len(self._flats) >= 64:
                self._flats.clear()
            kept = self._flats[key] = t
        return kept

    def _slices(self, bs: int, ntok: int) -> _Views:
        dev = self._device_in
        return _Views(dev[:bs], dev[bs : 2 * bs], dev[2 * bs : 3 * bs], dev[3 * bs : 3 * bs + ntok])

    def _lut_updates(self, rids: list[str], pasts: list[int], queries: list[int], out: np.ndarray[Any, Any]) -> int:
        """Stage ``full slot -> ring slot`` for each request's verified window and new tokens, from the
        engine's sliding block table as it is now; return the number of entries (indices, then values).

        The window is the ``window - 1`` positions before the step (what the step's attention reads).
        Positions whose ring slot this step's own tokens overwrite (a chunk longer than one token) map to
        slot 0, which the verify skips (the TAIL verify would fold the new token's KV there); when that is the
        position before the chunk (a chunk of ``window`` tokens or more), the manager starts the request's
        SWA chain at the anchor rather than seed it from slot 0. New tokens the ring does not keep (a chunk
        longer than the window) map to -1, which the write skips. Built with numpy array ops over every entry
        of the step at once, into the host staging ``out`` (no torch op, no per-request array)."""
        sw = self.layout.sliding
        assert sw is not None
        w, page, stride = sw.window, sw.page, sw.stride
        listed: list[list[int]] = [b or [] for b in map(sw.block_table.get, rids)]
        if not all(listed):  # requests holding no ring block yet have no entries
            kept = [i for i, b in enumerate(listed) if b]
            if not kept:
                return 0
            rids = [rids[i] for i in kept]
            pasts = [pasts[i] for i in kept]
            queries = [queries[i] for i in kept]
            listed = [listed[i] for i in kept]
        past = np.array(pasts, dtype=np.int64)
        q = np.array(queries, dtype=np.int64)
        nblocks = np.fromiter(map(len, listed), dtype=np.int64, count=len(listed))
        blocks = np.fromiter(itertools.chain.from_iterable(listed), dtype=np.int64)
        lo = np.maximum(past - (w - 1), 0)
        lens = past + q - lo
        m = int(lens.sum())
        req = np.repeat(np.arange(len(listed)), lens)  # each entry's request
        starts = np.cumsum(lens) - lens
        p = np.arange(m, dtype=np.int64) - starts[req] + lo[req]  # each entry's position
        ring = p % w
        first = np.cumsum(nblocks) - nblocks  # each request's first block in ``blocks``
        slot = blocks[first[req] + np.minimum(ring // page, nblocks[req] - 1)] * stride + ring % page
        pr, qr = past[req], q[req]
        slot[(p < pr) & (p < pr - w + qr)] = 0
        slot[(p >= pr) & (p < pr + qr - w)] = -1
        rows = np.array([self.rows.row_of[r] for r in rids], dtype=np.int64)
        out[:m] = self.rows.host_array()[rows[req], p]
        out[m : 2 * m] = slot
        return m

"""The attached canary: wraps transformers' model-runner step, runs HEAD before the forward, TAIL after.

``ModelRunner.compute_batch(model, batch_data)`` is the one call every continuous-batching step makes
with the step's own inputs (``input_ids``, ``position_ids``, the ``write_index`` per group, the cache)
while the batch's request states sit in ``runner.inputs_and_outputs.requests_in_batch``. Attaching
replaces that method on the class with a wrapper that, for the attached model only, maps the step onto a
:class:`~kvcanary.manager.CanaryBatch`, runs the manager's HEAD, the original step, the manager's TAIL,
then ``end_step`` (the sweep over shared and cached blocks, the asynchronous read-back, the report).
Detaching puts the original method back. The canary only reads the engine's tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kvcanary.consts import CanaryMode, PoolKind, RealKvHashMode
from kvcanary.integrations.transformers.layout import CacheLayout, read_layout
from kvcanary.integrations.transformers.rows import RequestRows
from kvcanary.manager import (
    CanaryBatch,
    CanaryCapacities,
    CanaryConfig,
    CanaryManager,
    KvPoolSpec,
    PoolGroupSpec,
    SweepEntries,
    ViolationEvent,
)
from kvcanary.violations import canary_kind

logger = logging.getLogger("kvcanary.transformers")


@dataclass(frozen=True)
class ScheduledRequest:
    """One request of a step, as the engine scheduled it: tokens already cached, tokens this step."""

    request_id: str
    past_length: int
    query_length: int


@dataclass(frozen=True)
class StepView:
    """What a step hook sees before the forward: the engine's kwargs (mutable: a fault may edit them),
    the scheduled requests in token order, the cache layout and the step number."""

    step: int
    batch_data: dict[str, Any]
    requests: tuple[ScheduledRequest, ...]
    layout: CacheLayout
    rows: RequestRows


StepHook = Callable[[StepView], None]


@dataclass(frozen=True)
class CanaryReport:
    """A violation with the requests whose blocks hold its slot (empty for a cached, unowned block)."""

    event: ViolationEvent
    request_ids: tuple[str, ...]

    @property
    def check(self) -> str:
        """``per_forward_head_k_full``, ``sweep_v_full``... (the launch tag, lower case)."""
        return canary_kind(self.event.violation.kernel_kind)


class _PoolState:
    """The manager and the row mirror of one paged cache (one generate_batch run or persistent manager)."""

    def __init__(self, session: TransformersCanary, runner: Any) -> None:
        cache = runner.cache
        self.cache = cache
        self.layout = read_layout(cache)
        lay = self.layout
        dev = lay.k_rows.device
        max_reqs = int(runner.inputs_and_outputs.max_requests_per_batch)
        rows = session.max_requests or (2 * max_reqs + 1)
        model_len = getattr(cache.config, "max_position_embeddings", None)
        max_len = session.max_context_len or min(lay.num_token_slots, int(model_len or lay.num_token_slots))
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
        config = session.config
        if lay.sliding is not None:  # transformers shares and caches no block of a model with a sliding group
            config = dataclasses.replace(config, sweep_interval=0)
        self.manager = CanaryManager.attach(
            pool=KvPoolSpec(groups=tuple(groups), req_to_token=self.rows.device_table), capacities=caps,
            config=config)
        self.swept = 0
        if config.sweep_interval:
            self.manager.set_sweep_source(self._sweep_entries)
        self.manager.mark_init_finished()  # no warmup batches: graphs and compile are refused
        self._staging = torch.zeros(caps.write_req_capacity * 3 + caps.write_token_capacity + lut_room,
                                    dtype=torch.int64,
                                    pin_memory=dev.type == "cuda")
        self._device_in = torch.zeros_like(self._staging, device=dev)

    def _sweep_entries(self) -> SweepEntries:
        entries = self.rows.sweep_entries(set(self.layout.cached_blocks()) | self.rows.shared_blocks())
        self.swept += len(entries)
        return entries

    def batch(self, reqs: tuple[ScheduledRequest, ...], batch_data: dict[str, Any]) -> CanaryBatch:
        """The step as a CanaryBatch: rows, prefix and extend lengths and write slots staged in one copy;
        token ids and positions are the engine's own input tensors."""
        self.rows.release_finished()
        bs = len(reqs)
        ntok = sum(r.query_length for r in reqs)
        host = self._staging
        meta: list[int] = [0] * (3 * bs)
        loc: list[int] = []
        for i, r in enumerate(reqs):
            meta[i] = self.rows.sync(r.request_id, r.past_length + r.query_length)
            meta[bs + i] = r.past_length
            meta[2 * bs + i] = r.query_length
            loc += self.rows.slots(r.request_id, r.past_length, r.past_length + r.query_length)
        write_index = batch_data.get("write_index") or []
        idx = self.layout.index
        engine_loc = write_index[idx][:ntok] if len(write_index) > idx and batch_data.get("block_table") is None \
            else None
        if engine_loc is None or engine_loc.shape[0] != ntok:
            engine_loc = None
        host[: 3 * bs + ntok] = torch.tensor(meta + loc, dtype=torch.int64)
        m = self._lut_updates(reqs, host[3 * bs + ntok :]) if self.lut is not None else 0
        end = 3 * bs + ntok + 2 * m
        dev = self._device_in[:end]
        dev.copy_(host[:end], non_blocking=True)
        if self.lut is not None and m:
            self.lut.index_copy_(0, dev[3 * bs + ntok : 3 * bs + ntok + m], dev[3 * bs + ntok + m : end])
        return CanaryBatch(req_pool_indices=dev[:bs], prefix_lens=dev[bs : 2 * bs], extend_lens=dev[2 * bs : 3 * bs],
                           input_ids=batch_data["input_ids"][0, :ntok], positions=batch_data["position_ids"][0, :ntok],
                           out_cache_loc=engine_loc if engine_loc is not None else dev[3 * bs :])


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


_LOCK = threading.Lock()
_ACTIVE: dict[int, TransformersCanary] = {}
_ORIGINAL: dict[str, Any] = {}


def _runner_class() -> Any:
    from transformers.generation.continuous_batching.model_runner import ModelRunner

    return ModelRunner


def _install() -> None:
    cls = _runner_class()
    if "compute_batch" in _ORIGINAL:
        return
    original = cls.compute_batch
    _ORIGINAL["compute_batch"] = original

    def compute_batch(self: Any, model: Any, batch_data: dict[str, Any]) -> None:
        session = _ACTIVE.get(id(model))
        if session is None:
            original(self, model, batch_data)
            return
        session._step(self, model, batch_data, original)

    compute_batch.__wrapped__ = original  # type: ignore[attr-defined]
    cls.compute_batch = compute_batch


def _uninstall() -> None:
    original = _ORIGINAL.pop("compute_batch", None)
    if original is not None:
        _runner_class().compute_batch = original


def check_runner(runner: Any) -> None:
    """Refuse a model runner whose settings the canary cannot follow, with the setting to change."""
    if getattr(runner, "pad_inputs", False):
        raise RuntimeError("kv-canary: the transformers integration runs eagerly around the step; turn CUDA "
                           "graphs and torch.compile off (ContinuousBatchingConfig(use_cuda_graph=False), no "
                           "compile configs)")
    offload = getattr(runner.cb_config, "cpu_offload_space", 0.0)
    if offload is None or offload > 0:
        raise RuntimeError("kv-canary: CPU offloading copies KV between blocks without the canary records; pass "
                           "ContinuousBatchingConfig(cpu_offload_space=0) with canaries attached")
    if not hasattr(runner.inputs_and_outputs, "requests_in_batch"):
        raise RuntimeError("kv-canary: asynchronous batching is not supported; pass "
                           "ContinuousBatchingConfig(use_async_batching=False)")


class TransformersCanary:
    """Canaries on one model's continuous-batching runs. Use :func:`attach_canaries`."""

    def __init__(self, model: Any, *, config: CanaryConfig, max_requests: int | None,
                 max_context_len: int | None) -> None:
        self.model = model
        self.config = config
        self.max_requests = max_requests
        self.max_context_len = max_context_len
        self.hooks: list[StepHook] = []
        self.reports: list[CanaryReport] = []
        self.steps = 0
        self.prefix_hits = 0
        """Requests the engine admitted with part of their prompt already cached (prefix-shared blocks)."""
        self.swept_entries = 0
        """Cached and shared slots verified by the sweeps so far."""
        self.host_seconds: dict[str, float] = dict.fromkeys(("map", "head", "forward", "tail", "end_step"), 0.0)
        """Host time spent per phase of the wrapped steps (the benchmark's breakdown; launches are asynchronous
        on a GPU, so this is enqueue time there)."""
        self._seen: set[str] = set()
        self._pools: dict[int, _PoolState] = {}
        self._attached = False

    # -- attach / detach -----------------------------------------------------------------------------
    def attach(self) -> TransformersCanary:
        """Install the step wrapper for this model (idempotent)."""
        with _LOCK:
            if id(self.model) in _ACTIVE and _ACTIVE[id(self.model)] is not self:
                raise RuntimeError("kv-canary: canaries are already attached to this model; detach them first")
            _install()
            _ACTIVE[id(self.model)] = self
            self._attached = True
        return self

    def detach(self) -> list[CanaryReport]:
        """Remove the wrapper (the engine is as it was), read what is still in flight, return every report."""
        with _LOCK:
            _ACTIVE.pop(id(self.model), None)
            if not _ACTIVE:
                _uninstall()
            self._attached = False
        for pool in self._pools.values():
            self._collect(pool, pool.manager.flush())
        return self.reports

    def __enter__(self) -> TransformersCanary:
        return self.attach()

    def __exit__(self, *exc: object) -> None:
        self.detach()

    # -- what it found -------------------------------------------------------------------------------
    @property
    def managers(self) -> list[CanaryManager]:
        """The canary manager of each paged cache seen so far (one per generate_batch run)."""
        return [p.manager for p in self._pools.values()]

    @property
    def layout(self) -> CacheLayout | None:
        """The layout of the latest paged cache (None before the first step)."""
        return next(reversed(self._pools.values())).layout if self._pools else None

    def _collect(self, pool: _PoolState, events: list[ViolationEvent]) -> list[CanaryReport]:
        new = []
        sw = pool.layout.sliding
        for e in events:
            slot = e.violation.slot_idx
            if sw is not None and e.violation.tag_name.endswith("_SWA"):
                owners = tuple(r for r, b in sw.block_table.items() if slot // sw.stride in b)
            else:
                owners = tuple(pool.rows.owners(pool.layout.block_of(slot)))
            new.append(CanaryReport(e, owners))
            logger.warning("kv-canary: %s slot %d belongs to request(s) %s", e.violation.tag_name,
                           e.violation.slot_idx, ", ".join(owners) or "none (cached block)")
        self.reports += new
        return new

    # -- the step ------------------------------------------------------------------------------------
    def _pool(self, runner: Any) -> _PoolState:
        check_runner(runner)
        pool = self._pools.get(id(runner.cache))
        if pool is None or pool.cache is not runner.cache:
            pool = _PoolState(self, runner)
            self._pools[id(runner.cache)] = pool
        return pool

    def _step(self, runner: Any, model: Any, batch_data: dict[str, Any], original: Any) -> None:
        pool = self._pool(runner)
        reqs = tuple(ScheduledRequest(fs.state.request_id, fs.state.position_offset - fs.query_length,
                                      fs.query_length) for fs in runner.inputs_and_outputs.requests_in_batch)
        for r in reqs:
            if r.request_id not in self._seen:
                self._seen.add(r.request_id)
                self.prefix_hits += r.past_length > 0
        for hook in self.hooks:
            hook(StepView(self.steps, batch_data, reqs, pool.layout, pool.rows))
        stream = runner.inputs_and_outputs.compute_stream
        ctx = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        manager = pool.manager
        clock = self.host_seconds
        with ctx:
            t0 = time.perf_counter()
            batch = pool.batch(reqs, batch_data)
            t1 = time.perf_counter()
            manager.prepare(batch)
            manager.head(batch)
            t2 = time.perf_counter()
            original(runner, model, batch_data)
            t3 = time.perf_counter()
            manager.tail()
            t4 = time.perf_counter()
            seen = len(manager.events)
            try:
                manager.end_step()
            except RuntimeError as err:  # RAISE mode: name the requests, then fail the batch
                found = self._collect(pool, manager.events[seen:])
                owners = sorted({r for f in found for r in f.request_ids})
                raise RuntimeError(f"{err}\nkv-canary: requests affected: {', '.join(owners) or 'none'}") from None
            self._collect(pool, manager.events[seen:])
            t5 = time.perf_counter()
        for name, dt in (("map", t1 - t0), ("head", t2 - t1), ("forward", t3 - t2), ("tail", t4 - t3),
                         ("end_step", t5 - t4)):
            clock[name] += dt
        self.steps += 1
        self.swept_entries = sum(p.swept for p in self._pools.values())


def attach_canaries(model: Any, *, mode: str = "log", real_kv: str = "partial", sweep_interval: int = 4,
                    enable_v: bool = True, backend: str | None = None, max_requests: int | None = None,
                    max_context_len: int | None = None) -> TransformersCanary:
    """Canaries on ``model``'s continuous-batching runs (``generate_batch``, the manager, ``serve``).

    ``with attach_canaries(model) as canary: model.generate_batch(...)``; ``canary.reports`` lists what
    was found. ``mode``: ``log`` or ``raise`` (the step fails, naming the requests); ``real_kv``:
    ``partial`` (16 bytes of each K/V row) or ``all``; ``sweep_interval``: steps between sweeps of shared
    and cached blocks (0: off). ``max_requests`` / ``max_context_len`` size the request table (default:
    twice the engine's batch, and the model's ``max_position_embeddings`` or the cache, whichever is less).
    """
    import transformers

    from kvcanary.integrations.transformers.version import check_version

    check_version(transformers.__version__)
    if real_kv.strip().lower() not in ("partial", "all"):
        raise ValueError(f"kv-canary: real_kv must be 'partial' or 'all', got {real_kv!r}")
    if mode.strip().lower() not in ("log", "raise"):
        raise ValueError(f"kv-canary: mode must be 'log' or 'raise', got {mode!r}")
    config = CanaryConfig.from_strings(mode=mode, real_data=real_kv, sweep_interval=sweep_interval,
                                       enable_v=enable_v, backend=backend, stats_every=10**9)
    assert config.real_kv_mode is not RealKvHashMode.NONE and config.mode is not CanaryMode.NONE
    return TransformersCanary(model, config=config, max_requests=max_requests, max_context_len=max_context_len)

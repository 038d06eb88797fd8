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
import logging
import operator
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kvcanary.backend_names import check_backend
from kvcanary.consts import CanaryMode, RealKvHashMode
from kvcanary.extensions import Extensions
from kvcanary.guard.history import DEFAULT_GUARD_HISTORY
from kvcanary.guard.sink import GuardSink
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.integrations.transformers.guard import TfGuard
from kvcanary.integrations.transformers.layout import CacheLayout, read_layout
from kvcanary.integrations.transformers.pool import PoolState, ScheduledRequest
from kvcanary.integrations.transformers.rows import RequestRows
from kvcanary.integrations.transformers.settings import RequestTableSizes, attach_config
from kvcanary.manager import (
    CanaryConfig,
    CanaryManager,
    ViolationEvent,
)
from kvcanary.violations import canary_kind

logger = logging.getLogger("kvcanary.transformers")


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


FORK_MARK = "__child#"
"""What transformers appends to a request id to name the requests it forks from it (parallel sampling)."""

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


def check_fresh(layout: CacheLayout, reqs: tuple[ScheduledRequest, ...]) -> None:
    """Refuse a cache that already holds KV written without canaries: its records would be missing, so every
    verify of it would report. Fresh means: no request of the step has tokens cached, no other request holds
    blocks, and the prefix cache keeps no block."""
    stepping = {r.request_id for r in reqs}
    cached = [r.request_id for r in reqs if r.past_length > 0]
    others = [rid for rid, blocks in layout.block_table.items() if rid not in stepping and blocks]
    kept = layout.cached_blocks()
    if cached or others or kept:
        raise RuntimeError(
            "kv-canary: this paged cache already holds KV written without canaries "
            f"({len(cached) + len(others)} request(s) with cached tokens, {len(kept)} prefix-cache block(s)); "
            "attach canaries before the cache serves its first request (with a persistent manager or "
            "ContinuousBatchingManager, keep one attach_canaries block around all of its runs)")


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
        self._swept_retired = 0
        self._sweep_seconds_retired = 0.0
        self.host_seconds: dict[str, float] = dict.fromkeys(("map", "head", "forward", "tail", "end_step"), 0.0)
        """Host time spent per phase of the wrapped steps (the benchmark's breakdown; launches are asynchronous
        on a GPU, so this is enqueue time there)."""
        self._seen: set[str] = set()
        self._guards_retired: list[TfGuard] = []
        self._pools: dict[int, PoolState] = {}
        self._ready: tuple[weakref.ref[Any], Any, PoolState] | None = None
        """The last step's runner (weakly: transformers frees a finished run's runner and its buffers), its cache
        and their pool: a step of that runner on that cache skips the runner check (its settings are fixed when
        transformers builds it) and the pool lookup. Let go on detach."""
        self._attached = False
        self.sinks: list[GuardSink] = []
        """Added to each cache's manager (kvcanary.monitor: metrics, JSON events, health)."""

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
        """Remove the wrapper (the engine is as it was), read what is still in flight, return every report.

        Detaching twice, or after another session attached to the model, changes nothing but the reports. In
        ``raise`` mode a violation found only now (the last steps' read-back) raises after every cache was
        read, naming the requests."""
        with _LOCK:
            if self._attached and _ACTIVE.get(id(self.model)) is self:
                del _ACTIVE[id(self.model)]
                if not _ACTIVE:
                    _uninstall()
            self._attached = False
        self._ready = None  # the runner (and its buffers) is not kept past the run
        try:
            self._flush_all(raise_found=True)
        finally:
            for p in self._pools.values():
                if p.guard is not None:
                    p.guard.close()
        return self.reports

    def __enter__(self) -> TransformersCanary:
        return self.attach()

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.detach()
            return
        # an error is already on its way out: detach and report, never replace it
        with contextlib.suppress(RuntimeError):
            self.detach()

    def _flush_all(self, *, raise_found: bool) -> None:
        """Read back every cache's violations; in raise mode, raise once all were read, naming the requests."""
        errors: list[str] = []
        owners: set[str] = set()
        for pool in list(self._pools.values()):
            seen = len(pool.manager.events)
            try:
                self._collect(pool, pool.manager.flush())
            except RuntimeError as err:
                errors.append(str(err))
                owners |= {r for f in self._collect(pool, pool.manager.events[seen:]) for r in f.request_ids}
        if errors and raise_found:
            affected = ", ".join(sorted(owners)) or "none"
            raise RuntimeError("\n".join(errors) + f"\nkv-canary: requests affected: {affected}")

    def _retire_guards(self) -> None:
        for p in self._pools.values():
            if p.guard is not None:
                p.guard.close()
                self._guards_retired.append(p.guard)

    @property
    def guards(self) -> list[TfGuard]:
        """The guard of every cache seen (earlier runs' first): under the isolate policy, and as the journal
        feeder of the write-time owner check; empty under log and raise otherwise."""
        return self._guards_retired + [p.guard for p in self._pools.values() if p.guard is not None]

    @property
    def failed(self) -> dict[str, str]:
        """Requests the isolate policy failed: request id -> the error transformers returned for it (each
        guard's newest ``config.guard_history``; the monitor counts every one)."""
        return {rid: msg for g in self.guards for rid, msg in g.failed.items()}

    def _retire_pools(self) -> None:
        """A new cache replaced the previous one (a new generate_batch run): read the old caches' last
        violations, keep the reports, and let their KV and canary buffers go."""
        self._ready = None
        if self._pools:
            self._flush_all(raise_found=False)
            self._retire_guards()
            self._swept_retired += sum(p.swept for p in self._pools.values())
            self._sweep_seconds_retired += sum(p.sweep_entry_seconds for p in self._pools.values())
            self._pools.clear()

    def add_sink(self, sink: GuardSink) -> None:
        """``sink`` hears every manager of this model's caches, the current one and later ones."""
        for pool in self._pools.values():
            pool.manager.add_sink(sink)
        self.sinks.append(sink)

    def owners(self, event: ViolationEvent) -> tuple[str, ...]:
        """The requests whose blocks hold ``event``'s slot in the latest cache, now (empty for a cached block
        no request holds)."""
        if not self._pools:
            return ()
        return self._owners(next(reversed(self._pools.values())), event)

    @staticmethod
    def _owners(pool: PoolState, e: ViolationEvent) -> tuple[str, ...]:
        slot = e.violation.slot_idx
        sw = pool.layout.sliding
        if sw is not None and e.violation.tag_name.endswith("_SWA"):
            return tuple(r for r, b in sw.block_table.items() if slot // sw.stride in b)
        return tuple(pool.rows.owners(pool.layout.block_of(slot)))

    # -- what it found -------------------------------------------------------------------------------
    @property
    def swept_entries(self) -> int:
        """Cached and shared slots verified by the sweeps so far."""
        return self._swept_retired + sum(p.swept for p in self._pools.values())

    @property
    def sweep_entry_seconds(self) -> float:
        """Host time spent building the sweeps' entry lists so far (part of ``host_seconds["end_step"]``)."""
        return self._sweep_seconds_retired + sum(p.sweep_entry_seconds for p in self._pools.values())

    @property
    def managers(self) -> list[CanaryManager]:
        """The canary manager of the paged cache in use (the latest generate_batch run; earlier runs' caches
        are let go when the next one starts, their reports kept)."""
        return [p.manager for p in self._pools.values()]

    @property
    def layout(self) -> CacheLayout | None:
        """The layout of the latest paged cache (None before the first step)."""
        return next(reversed(self._pools.values())).layout if self._pools else None

    def _collect(self, pool: PoolState, events: list[ViolationEvent]) -> list[CanaryReport]:
        new = []
        for e in events:
            owners = self._owners(pool, e)
            new.append(CanaryReport(e, owners))
            logger.warning("kv-canary: %s slot %d belongs to request(s) %s", e.violation.tag_name,
                           e.violation.slot_idx, ", ".join(owners) or "none (cached block)")
        self.reports += new
        return new

    # -- the step ------------------------------------------------------------------------------------
    def _pool(self, runner: Any, requests: Callable[[], tuple[ScheduledRequest, ...]]) -> PoolState:
        ready = self._ready
        if ready is not None and ready[1] is runner.cache and ready[0]() is runner:
            return ready[2]  # the usual step: the runner and the cache of the previous one
        check_runner(runner)
        pool = self._pools.get(id(runner.cache))
        if pool is None or pool.cache is not runner.cache:
            check_fresh(read_layout(runner.cache), requests())
            self._retire_pools()
            pool = PoolState(runner, config=self.config, max_requests=self.max_requests,
                             max_context_len=self.max_context_len)
            for sink in self.sinks:
                pool.manager.add_sink(sink)
            self._pools[id(runner.cache)] = pool
        self._ready = (weakref.ref(runner), runner.cache, pool)
        return pool

    def _requests(self, runner: Any) -> tuple[list[str], list[int], list[int], list[int]]:
        """The step's scheduled requests in token order: ids, tokens already cached, tokens this step, and tokens
        cached once the step is done (the engine's position offsets, read once: the map's rows sync takes them
        as they are)."""
        states = runner.inputs_and_outputs.requests_in_batch
        rids = [fs.state.request_id for fs in states]
        query = [fs.query_length for fs in states]
        written = [fs.state.position_offset for fs in states]
        return rids, list(map(operator.sub, written, query)), query, written

    def _step(self, runner: Any, model: Any, batch_data: dict[str, Any], original: Any) -> None:
        t_read = time.perf_counter()
        rids, past, query, written = self._requests(runner)
        t_read = time.perf_counter() - t_read  # part of the map (as is the seen-request check below)
        made: list[tuple[ScheduledRequest, ...]] = []

        def requests() -> tuple[ScheduledRequest, ...]:
            """The step's requests as ScheduledRequest (made only for a hook or a new cache)."""
            if not made:
                made.append(tuple(map(ScheduledRequest, rids, past, query)))
            return made[0]

        pool = self._pool(runner, requests)
        t_seen = time.perf_counter()
        known = self._seen
        if not known.issuperset(rids):  # the usual step: every request was seen before (one set test)
            for rid, p in zip(rids, past, strict=True):
                if rid not in known:
                    if FORK_MARK in rid:
                        raise RuntimeError(
                            f"kv-canary: request {rid} is a fork (parallel sampling, num_return_sequences > 1): "
                            "transformers copies its blocks without the canary records; generate one sequence per "
                            "request with canaries attached")
                    known.add(rid)
                    self.prefix_hits += p > 0
        t_read += time.perf_counter() - t_seen
        for hook in self.hooks:
            hook(StepView(self.steps, batch_data, requests(), pool.layout, pool.rows))
        stream = runner.inputs_and_outputs.compute_stream
        ctx = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        manager = pool.manager
        clock = self.host_seconds
        with ctx:
            t0 = time.perf_counter()
            batch = pool.batch(rids, past, query, batch_data, written=written)
            t1 = time.perf_counter()
            manager.prepare(batch)
            try:
                manager.head(batch)
                t2 = time.perf_counter()
                original(runner, model, batch_data)
                t3 = time.perf_counter()
                manager.tail()
                t4 = time.perf_counter()
            except BaseException:  # the HEAD, the model or the TAIL raised: the manager forgets the forward
                manager.abort_forward()
                raise
            seen = len(manager.events)
            try:
                manager.end_step(stats=False)  # the stats are not read here: a quiet step makes none
            except RuntimeError as err:  # RAISE mode: name the requests, then fail the batch
                found = self._collect(pool, manager.events[seen:])
                owners = sorted({r for f in found for r in f.request_ids})
                raise RuntimeError(f"{err}\nkv-canary: requests affected: {', '.join(owners) or 'none'}") from None
            if len(manager.events) > seen:  # the usual step reports nothing: no list to slice, no call
                self._collect(pool, manager.events[seen:])
            t5 = time.perf_counter()
        for name, dt in (("map", t1 - t0 + t_read), ("head", t2 - t1), ("forward", t3 - t2), ("tail", t4 - t3),
                         ("end_step", t5 - t4)):
            clock[name] += dt
        self.steps += 1


def check_model(model: object) -> None:
    """``model`` must be one transformers steps with continuous batching (it has ``generate_batch``): the step
    wrapper follows the model ``compute_batch`` is called with, so another object (the inner base model, a
    model id) would attach to nothing and a run would report nothing. A TypeError naming ``model`` otherwise."""
    if not callable(getattr(model, "generate_batch", None)):
        raise TypeError("kv-canary: model must be a transformers model with continuous batching (one with "
                        "generate_batch, such as AutoModelForCausalLM.from_pretrained(...)'s, not its inner base "
                        f"model nor a model id), got {type(model).__name__}")


def attach_canaries(model: Any, *, mode: str = "log", real_kv: str = "partial", sweep_interval: int = 4,
                    enable_v: bool = True, backend: str | None = None, max_requests: int | None = None,
                    max_context_len: int | None = None, on_violation: str | None = None,
                    owner_check: bool = False,
                    guard_history: int | None = DEFAULT_GUARD_HISTORY) -> TransformersCanary:
    """Canaries on ``model``'s continuous-batching runs (``generate_batch``, the manager, ``serve``).

    ``with attach_canaries(model) as canary: model.generate_batch(...)``; ``canary.reports`` lists what
    was found. ``model``: the one ``generate_batch`` is called on (not its inner base model). ``mode``: ``log``
    or ``raise`` (the step fails, naming the requests); ``real_kv``: ``partial`` (16 bytes of each K/V row) or
    ``all``; ``sweep_interval``: steps between sweeps of shared and cached blocks (0: off); ``backend``: a
    registered backend's name (None: the registry's choice). ``max_requests`` / ``max_context_len`` size the
    request table, positive ints (None: twice the engine's batch, and the model's ``max_position_embeddings``
    or the cache, whichever is less). A value none of these rules takes is refused here, before anything runs.
    ``on_violation`` (None: ``mode``): ``log``, ``raise`` or ``isolate``: the requests that read corrupt KV end
    in transformers' failed state with kvcanary's error text, the run goes on, the poisoned blocks leave the
    prefix cache and the free lists (``canary.failed``, ``canary.guards``; docs/policies.md);
    ``guard_history``: how many of the newest failed requests and decisions each guard keeps (None: every one;
    ``CanaryConfig.guard_history``), so a long-running server's records stay bounded.
    ``owner_check``: the write-time owner check (``Extensions(write_slot_owner_mismatch=True)``): a write into
    a block another live request wrote, or one only the prefix cache keeps, is reported at the write, naming
    both request rows (docs/extensions/write-slot-owner-mismatch.md).
    """
    import transformers

    from kvcanary.integrations.transformers.version import check_version

    check_version(transformers.__version__)
    check_model(model)
    RequestTableSizes(max_requests=max_requests, max_context_len=max_context_len)  # their rules and codes: KVC-F
    if not isinstance(owner_check, bool):
        raise TypeError(f"kv-canary: owner_check must be a bool, got {type(owner_check).__name__}")
    policy = ViolationPolicy.parse(on_violation) if on_violation is not None else None
    config = attach_config(mode=mode, real_kv=real_kv, on_violation=policy, sweep_interval=sweep_interval,
                           enable_v=enable_v, backend=backend, stats_every=10**9,
                           extensions=Extensions(write_slot_owner_mismatch=True) if owner_check else None,
                           guard_history=guard_history)
    check_backend(backend)  # after the config's own checks of its type and its emptiness
    assert config.real_kv_mode is not RealKvHashMode.NONE and config.mode is not CanaryMode.NONE
    return TransformersCanary(model, config=config, max_requests=max_requests, max_context_len=max_context_len)

"""CanaryManager: the engine-facing object that owns every canary buffer of one KV pool.

Lifecycle per step (as in SGLang's engine integration), for each forward of the step::

    manager.prepare(batch)      # host, outside any graph: capacity checks, expected-token scatter
    manager.head(batch)         # may be captured: plan, HEAD verify + write
    model.forward(...)
    manager.tail()              # may be captured: TAIL verify + write (real-KV of the fresh KV)

and once per step ``manager.end_step()`` (host): sweep when due, start the D2H pump and report what the
previous step's copy holds, the health check, the stats line. Everything is allocated in :meth:`attach`.
A forward whose model raised between head and tail ends with ``manager.abort_forward()`` (the step cannot end
while a HEAD waits for its TAIL).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Literal, overload

import torch

from kvcanary.constructors.expected_tokens import check_expected_tokens
from kvcanary.constructors.manager import check_manager
from kvcanary.consts import CanaryLaunchTag, PoolKind
from kvcanary.extensions import write_owner_on
from kvcanary.guard.adapter import EngineAdapter
from kvcanary.guard.decision import GuardDecision, RequestFailure
from kvcanary.guard.followup import followup_decision
from kvcanary.guard.history import History
from kvcanary.guard.journal import SlotJournal
from kvcanary.guard.policy import Isolation, ViolationPolicy
from kvcanary.guard.sink import GuardSink
from kvcanary.launch.scatter import launch_scatter_req_token_ids_kernel
from kvcanary.manager.batch import CanaryBatch
from kvcanary.manager.branch import VBranch
from kvcanary.manager.buffers import CanaryBufferGroup
from kvcanary.manager.capacities import CanaryCapacities
from kvcanary.manager.config import CanaryConfig
from kvcanary.manager.config_change import check_config_change
from kvcanary.manager.endpoints import Endpoint, Phase, build_endpoints
from kvcanary.manager.forward import ForwardRunner
from kvcanary.manager.graphs import ForwardGraphs, graphs_wanted
from kvcanary.manager.h2d import HostStaging
from kvcanary.manager.health import HealthChecker
from kvcanary.manager.owners import OwnerMap
from kvcanary.manager.pinned import PinnedInputs, check_size
from kvcanary.manager.pool import KvPoolSpec
from kvcanary.manager.pump import HEADER_SKIPPED, HostSnapshot, SnapshotPump
from kvcanary.manager.reporter import ViolationEvent, ViolationReporter
from kvcanary.manager.rotation import LayerRotation
from kvcanary.manager.state import CanaryDeviceState
from kvcanary.manager.stats import StepStats, new_source
from kvcanary.manager.sweep import SweepEntries, SweepRunner, SweepSource

if TYPE_CHECKING:
    from kvcanary.guard.sink import GuardSink

logger = logging.getLogger("kvcanary.manager")

_FIRST = 0
"""The usual forward slot. ``forward_index is _FIRST`` is the per-forward calls' fast path (one identity test:
CPython keeps one object for each small int); any other value, a ``0`` that is another object included, goes
through :meth:`CanaryManager._runner`, which checks its type and range (a bool or a float is refused there)."""

_Accepted = tuple[CanaryBatch, torch.Size, torch.Size, tuple[torch.Size, torch.Size] | None]
"""A batch :meth:`CanaryManager.prepare` accepted, with its rows', tokens' and expected-token snapshot's shapes."""


class CanaryManager:
    """Canary state and lifecycle of one KV pool. Build it with :meth:`attach`."""

    def __init__(self, *, pool: KvPoolSpec, capacities: CanaryCapacities, config: CanaryConfig,
                 adapter: EngineAdapter | None = None, sinks: tuple[GuardSink, ...] = ()) -> None:
        check_manager(pool=pool, capacities=capacities, config=config)  # the rules: constructors/manager.py
        self.pool = pool
        self.capacities = capacities
        self._config = config
        self._check_token = config.enable_verify_token  # read by every prepare
        self.device = pool.device
        use_graphs = graphs_wanted(config.graphs, device=self.device, compile=config.compile)  # before allocating
        r2t = pool.req_to_token
        self.groups = [CanaryBufferGroup.allocate(g, mode=config.real_kv_mode, enable_v=config.enable_v)
                       for g in pool.groups]
        self.state = CanaryDeviceState.allocate(
            ring_capacity=config.ring_capacity, device=self.device,
            expected_pool_shape=(int(r2t.shape[0]), int(r2t.shape[1])) if config.enable_verify_token else None,
            packed=not config.compile)
        sweep_on = config.sweep_interval > 0
        self.endpoints: list[Endpoint] = []
        for g in self.groups:
            self.endpoints += build_endpoints(g, self.state, config.real_kv_mode, sweep=sweep_on)
        self.rotations: list[LayerRotation | None] = [
            LayerRotation(layers=spec.layers, per_step=config.layer_rotation, mode=config.real_kv_mode,
                          tag=CanaryLaunchTag[f"TAIL_K_{spec.kind.name}"], state=self.state,
                          name=f"PoolGroupSpec({spec.kind.name})")
            if config.layer_rotation and spec.layers else None
            for spec in pool.groups]
        """Per group, its layer rotation (``config.layer_rotation`` and ``PoolGroupSpec.layers``), or None."""
        self._graph_pool = torch.cuda.graph_pool_handle() if use_graphs else None
        self.owners: OwnerMap | None = (OwnerMap(self.groups, self.device) if write_owner_on(config.extensions)
                                        else None)
        """The device owner map of the write-time owner check (``extensions.write_slot_owner_mismatch``), fed
        by the batches and by :attr:`journal` / :attr:`swa_journal`; None with the check off."""
        self._forwards = [
            ForwardRunner(groups=self.groups, endpoints=self.endpoints, state=self.state, capacities=capacities,
                          req_to_token=r2t, token_offset=pool.kv_token_id_vs_position_offset,
                          check_token=config.enable_verify_token,
                          write_input_assert=config.enable_write_input_assert, backend=config.backend,
                          budget=config.verify_budget, extensions=config.extensions, rotations=self.rotations,
                          compile=config.compile, graphs=self._graphs(config, capacities), owners=self.owners)
            for _ in range(config.num_forward_slots)
        ]
        self._sweep = SweepRunner(groups=self.groups, endpoints=self.endpoints, capacity=capacities.sweep_capacity,
                                  interval=config.sweep_interval, backend=config.backend,
                                  graphs=self._sweep_graphs(config) if sweep_on else None)
        self._sweep_source: SweepSource | None = None
        if config.enable_verify_token:
            size = capacities.expected_token_capacity + 2 * capacities.write_req_capacity + 1
            self._exp_dev = torch.zeros(size, dtype=torch.int64, device=self.device)
            self._exp_h2d = HostStaging(size, self.device)
        self._pump = SnapshotPump(self.state)
        self._pump_folded = self.state.packed is not None
        """Whether a bucketed forward's TAIL graph ends with the read-back copy (until the engine captures the
        manager's launches into a graph of its own: :meth:`_unfold_readback`)."""
        if self._pump_folded:
            for runner in self._forwards:
                runner.readback = self._pump
        self.branch = VBranch(self.device, self._pump.forked_pairs) if self.device.type == "cuda" and \
            not config.compile else None
        """The side stream V's launches run on while a graph is captured (:mod:`kvcanary.manager.branch`), one for
        every forward slot; None on a CPU and with ``compile`` (every phase launches K then V in turn)."""
        for runner in self._forwards:
            runner.branch = self.branch
        self.reporter = ViolationReporter(config.report_mode, config.ring_capacity)
        self.journal = self._journal(PoolKind.FULL, 1)
        """Who held each full-pool block when (the engine's adapter records into it; :meth:`set_adapter`)."""
        self.swa_journal = self._journal(PoolKind.SWA, 1)
        """The same for the sliding-window pool's slots (their own index space)."""
        self._isolation = Isolation(self.journal, self.swa_journal)
        self._watch_journals()
        self.adapter: EngineAdapter | None = None
        self._followups: list[GuardDecision] | None = None
        """While the adapter applies a decision: the follow-ups it reported (:meth:`report_failures`)."""
        self.sinks: list[GuardSink] = []
        """Who hears about violations, decisions and steps (:meth:`add_sink`)."""
        for sink in sinks:
            self.add_sink(sink)
        self.decisions: History[GuardDecision] = History(config.guard_history)
        """The decisions made so far (``isolate`` policy: one per step whose read-back held new rows), the newest
        ``config.guard_history`` of them; ``decisions.total`` counts every one (the monitor counts those that do
        something, and the adapter's follow-ups, :meth:`report_failures`, which are not kept here)."""
        if adapter is not None:
            self.set_adapter(adapter)
        self.health = HealthChecker(self.active_tags, warmup=config.health_warmup_steps, every=config.health_every)
        self._tags = tuple(self.active_tags)  # the stats' tags (the endpoints are fixed from here on)
        self._phase_tags = {p: tuple(sorted({e.tag for e in self.endpoints if e.phase is p})) for p in Phase}
        """The tags each phase launches (what the watchdog counts as issued)."""
        self._phase_ids = {p: tuple(int(t) for t in tags) for p, tags in self._phase_tags.items()}
        self._on_cuda = self.device.type == "cuda"  # read once: ``torch.device.type`` is not free per forward
        self._head_ids, self._tail_ids = self._phase_ids[Phase.HEAD], self._phase_ids[Phase.TAIL]  # per forward
        self.step = 0
        self.source_id = new_source()
        """This manager's number in its stats (``StepStats.source``): how a sink tells one manager from the next."""
        self.init_finished = False
        self._check_at = self.health.next_due(0)  # the next step whose end_step checks the watchdog
        self._mark_at = self.health.next_due(1) - 1  # the next step whose end_step marks for the check after it
        self._prepared = [False] * config.num_forward_slots
        self._checked: list[_Accepted | None] = [None] * config.num_forward_slots
        """Per forward slot, the last batch :meth:`prepare` accepted, with its rows' and tokens' shapes then
        (``req_pool_indices``, ``input_ids``) and its expected-token snapshot's (``flat``, ``lens``): the same
        object at those shapes passes the device and capacity checks again; one whose rows or tokens were resized
        in place since is checked and staged as a new batch, one whose snapshot was, checked again."""
        self._head_observers: list[Callable[[CanaryBatch], None]] = []

    def _graphs(self, config: CanaryConfig, capacities: CanaryCapacities) -> ForwardGraphs | None:
        """One forward slot's graphs per bucket (``config.graphs``), all in one memory pool of the manager."""
        if self._graph_pool is None:
            return None
        return ForwardGraphs(rows_capacity=capacities.write_req_capacity,
                             tokens_capacity=capacities.write_token_capacity, capture=True,
                             strict=config.graphs is True, pool=self._graph_pool)

    def _sweep_graphs(self, config: CanaryConfig) -> ForwardGraphs | None:
        """The sweep's one graph (``config.graphs``), in the manager's memory pool."""
        if self._graph_pool is None:
            return None
        return ForwardGraphs(rows_capacity=1, tokens_capacity=1, capture=True, strict=config.graphs is True,
                             pool=self._graph_pool)

    @property
    def graphs(self) -> list[ForwardGraphs | None]:
        """Each forward slot's own CUDA graphs (None where its forwards run unpadded and eagerly)."""
        return [r.graphs for r in self._forwards]

    @property
    def sweep_graphs(self) -> ForwardGraphs | None:
        """The sweep's own CUDA graph (None where every sweep launches eagerly: graphs off, or no sweep)."""
        return self._sweep.graphs

    @classmethod
    def attach(cls, *, pool: KvPoolSpec, capacities: CanaryCapacities, config: CanaryConfig,
               adapter: EngineAdapter | None = None, sinks: tuple[GuardSink, ...] = ()) -> CanaryManager:
        """Allocate every buffer, plan and endpoint for ``pool`` (once; nothing is allocated later)."""
        return cls(pool=pool, capacities=capacities, config=config, adapter=adapter, sinks=sinks)

    @property
    def config(self) -> CanaryConfig:
        """The settings the manager was attached with. Most are fixed at attach (they sized or built its
        buffers, plans and checks): assigning a config that changes one is refused by name (attach a new
        manager). ``stats_every`` and the policy between ``log`` and ``isolate`` (``on_violation``, ``mode``)
        are read at every step and may change (:mod:`kvcanary.manager.config_change`; for ``isolate``, give the
        manager its adapter too: :meth:`set_adapter`)."""
        return self._config

    @config.setter
    def config(self, config: CanaryConfig) -> None:
        check_config_change(self._config, config)
        self._config = config

    # -- the guard --------------------------------------------------------------------------------------
    @property
    def policy(self) -> ViolationPolicy:
        """The violation policy in effect (``config.policy``)."""
        return self._config.policy

    def set_adapter(self, adapter: EngineAdapter | None, *, block_size: int = 1,
                    swa_block_size: int | None = None) -> None:
        """The engine adapter that carries out the ``isolate`` policy's decisions, and the block sizes (in
        slots) of the journals it records into (a fresh journal pair when the sizes change). Every argument is
        checked before anything changes; the journals, the isolation reading them and the adapter are then
        replaced together."""
        if adapter is not None and not isinstance(adapter, EngineAdapter):
            raise TypeError(f"kv-canary: adapter must implement EngineAdapter (apply(decision)), "
                            f"got {type(adapter).__name__}")
        _block_size("block_size", block_size)
        if swa_block_size is not None:
            _block_size("swa_block_size", swa_block_size)
        swa = block_size if swa_block_size is None else swa_block_size
        if block_size != self.journal.block_size or swa != self.swa_journal.block_size:
            journal, swa_journal = self._journal(PoolKind.FULL, block_size), self._journal(PoolKind.SWA, swa)
            self.journal, self.swa_journal = journal, swa_journal
            self._isolation = Isolation(journal, swa_journal)
            self._watch_journals()
        self.adapter = adapter

    def _journal(self, kind: PoolKind, block_size: int) -> SlotJournal:
        """A journal for ``kind``'s slots (the full pool's when there is no such group), sized to its blocks:
        block ids below ``num_slots // block_size + 1``."""
        groups = {g.kind: g.num_slots for g in self.pool.groups}
        slots = groups.get(kind, groups[PoolKind.FULL])
        return SlotJournal(block_size=block_size, max_blocks=slots // block_size + 1)

    def _watch_journals(self) -> None:
        if self.owners is not None:  # slots come back to the owner map through the journals' events
            self.owners.watch(self.journal, PoolKind.FULL)
            self.owners.watch(self.swa_journal, PoolKind.SWA)

    def _guard(self, new: list[ViolationEvent], step: int) -> None:
        """The rows read back at ``step``: to the sinks, then (``isolate``) one decision to the adapter
        and the sinks. The sinks hear the decision also when the adapter raises (their record of it is the
        operator's only one); the adapter's error then goes on to the caller."""
        self._tell("on_violations", new)
        if self._config.policy is not ViolationPolicy.ISOLATE:
            return
        decision = self._isolation.decide(new, step)
        self.decisions.append(decision)
        try:
            if self.adapter is not None and not decision.empty:
                self._followups = []
                self.adapter.apply(decision)
        finally:
            self._tell("on_decision", decision)
            if self._followups is not None:  # what the adapter failed on its own, heard after the decision
                followups, self._followups = self._followups, None
                for d in followups:
                    self._tell("on_decision", d)

    def report_failures(self, failures: Sequence[RequestFailure], *, step: int) -> None:
        """The requests the engine adapter failed on its own, carrying out the decision of ``step``: those that
        held a block it quarantined (``KVC-G004``, :func:`~kvcanary.guard.followup.quarantined_failure`). Every
        sink hears them as one follow-up decision of only those failures (no violations, no blocks), so the
        monitor counts every request failed; called within the adapter's ``apply``, right after the decision
        itself. Kept nowhere here (not in :attr:`decisions`). A value of the wrong type is a TypeError."""
        decision = followup_decision(failures, step)
        if not decision.fail:
            return
        if self._followups is not None:
            self._followups.append(decision)
        else:
            self._tell("on_decision", decision)

    # -- configuration ----------------------------------------------------------------------------------
    @property
    def active_tags(self) -> list[CanaryLaunchTag]:
        """Tags with an endpoint (SWEEP tags only when the sweep is on), in tag order."""
        return sorted({e.tag for e in self.endpoints})

    def set_sweep_source(self, source: SweepSource | None) -> None:
        """The callable that returns the prefix cache's chains when a sweep is due (the radix walker)."""
        if source is not None and not callable(source):
            raise TypeError(f"kv-canary: set_sweep_source: source must be callable (returning SweepEntries) or "
                            f"None, got {type(source).__name__} {source!r}")
        self._sweep_source = source

    def mark_init_finished(self) -> None:
        """After warmup and graph capture: arm the write-time chain-position assert (it is 0 until now,
        because warmup and capture batches carry synthetic positions)."""
        self.state.enable_chain_position_assert.fill_(1)
        self.init_finished = True

    def transfer_buffers(self) -> list[tuple[str, torch.Tensor]]:
        """Every canary buffer, named (``full.k_head`` ...): what a KV transfer of a slot carries along.
        FULL buffers are indexed by full slot, SWA ones by SWA slot."""
        out = [nb for g in self.groups for nb in g.named_buffers()]
        for g, rot in zip(self.groups, self.rotations, strict=True):
            if rot is not None:
                out += [(f"{g.kind.name.lower()}.rotation{i}", b) for i, b in enumerate(rot.buffers())]
        return out

    # -- who hears about violations, decisions and steps (kvcanary.monitor, kvcanary.evidence, yours) -------
    def add_sink(self, sink: GuardSink) -> None:
        """``sink.on_violations(new events)`` when a read-back holds new rows, ``sink.on_decision(decision)``
        for each decision of the ``isolate`` policy, ``sink.on_step(stats)`` at every :meth:`end_step` and
        :meth:`flush`, also when the step raises (raise mode, the watchdog). A sink that raises is logged and
        never fails the step."""
        if not all(callable(getattr(sink, m, None)) for m in ("on_violations", "on_decision", "on_step")):
            raise TypeError(f"kv-canary: sink must implement on_violations, on_decision and on_step (GuardSink), "
                            f"got {type(sink).__name__}")
        self.sinks.append(sink)

    def _tell(self, method: str, *args: object) -> None:
        for sink in self.sinks:
            try:
                getattr(sink, method)(*args)
            except Exception:
                logger.exception("kv-canary: sink %s failed; the step goes on", type(sink).__name__)

    def _stats(self, step: int) -> StepStats:
        head, health = self._pump.header, self.health
        if head is None:
            return StepStats.from_snapshot(None, step=step, sweep_passes=self._sweep.passes, tags=self._tags,
                                           ring_capacity=self._config.ring_capacity, watchdog=health.state,
                                           watchdog_error=health.failure, source=self.source_id)
        return StepStats.from_header(head, snapshot_step=self._pump.read_step, step=step,
                                     sweep_passes=self._sweep.passes, tags=self._tags,
                                     ring_capacity=self._config.ring_capacity, watchdog=health.state,
                                     watchdog_error=health.failure, source=self.source_id)

    @property
    def last_snapshot(self) -> HostSnapshot | None:
        """What the device state held as of the last read-back (:meth:`end_step`'s of the previous step's copy,
        or :meth:`flush`'s), or None before any."""
        return self._pump.snapshot()

    # -- per forward ------------------------------------------------------------------------------------
    def _runner(self, forward_index: int) -> ForwardRunner:
        """The forward slot ``forward_index`` (any call but the usual ``0`` comes here: the checks of its type and
        range). A bool or a float is no slot number (``True`` would be slot 1)."""
        if type(forward_index) is not int and (isinstance(forward_index, bool) or
                                               not isinstance(forward_index, int)):
            raise TypeError(f"kv-canary: forward_index must be an int (a forward slot, 0 to num_forward_slots - "
                            f"1), got {type(forward_index).__name__} {forward_index!r}")
        if not 0 <= forward_index < len(self._forwards):
            raise ValueError(f"kv-canary: forward_index must be in [0, {len(self._forwards)}) (num_forward_slots), "
                             f"got {forward_index}")
        return self._forwards[forward_index]

    def pinned_inputs(self, size: int, *, forward_index: int = 0) -> PinnedInputs:
        """Pinned host inputs for the forward slot ``forward_index`` (made once per slot; a later call returns
        the same object, which must be at least ``size`` values): the engine's map writes a forward's values
        into :meth:`PinnedInputs.host`, commits them, and builds the batch from views of
        :attr:`PinnedInputs.device`; this slot's HEAD copies them in (inside its staged graph when the batch
        is kept), before anything reads them. Each forward of a step gets its own host buffer per step parity
        (up to :data:`~kvcanary.manager.pinned.FORWARDS_PER_STEP` forwards a step), so a buffer comes back two
        steps after its copy, which the read-back has seen finished by then: the host asks the device nothing
        in the usual step. More forwards in a step, or steps that never end, make the host wait for the
        device before it reuses a buffer."""
        check_size(size)  # before a slot's first inputs are made, and before one is compared with them
        runner = self._runner(forward_index)
        p = runner.pinned
        if p is None:
            p = runner.pinned = PinnedInputs(size, self.device,
                                             fence=self._pump.wait_through if self._on_cuda else None,
                                             current_step=lambda: self.step)
        elif p.size < size:
            raise ValueError(f"kv-canary: pinned_inputs(size={size}) for forward_index {forward_index}, whose "
                             f"pinned inputs already hold {p.size} values (one per slot: ask for the largest first)")
        return p

    def prepare(self, batch: CanaryBatch, *, forward_index: int = 0) -> None:
        """Host side, before the forward and outside any graph: validate the batch against the capacities,
        and scatter the expected-token snapshot when VERIFY_TOKEN is on."""
        runner = self._forwards[0] if forward_index is _FIRST else self._runner(forward_index)
        self._prepared[forward_index] = False  # a batch refused below leaves no forward prepared for head()
        caps, check_token, exp = self.capacities, self._check_token, batch.expected_tokens
        # the very batch of the previous forward, at the same sizes, passed these: four shape reads; a batch
        # resized in place is a new one (its checks, its bucket)
        last = self._checked[forward_index]
        rows, tokens = batch.req_pool_indices.shape, batch.input_ids.shape
        snapshot = None if exp is None else (exp.flat.shape, exp.lens.shape)
        resized = regrown = False
        if last is not None and batch is last[0]:  # kept: resized in place since, or its snapshot was?
            resized, regrown = rows != last[1] or tokens != last[2], snapshot != last[3]
            fresh = resized or regrown
        else:
            fresh = True
        if resized or regrown:  # its own rules ran at its shapes when it was built: again at the new ones
            batch.check_rules()
            if regrown and exp is not None:
                check_expected_tokens(flat=exp.flat, lens=exp.lens)
        if fresh:
            batch.validate(self.device)
        if self.owners is not None:
            self.owners.apply_pending()
        if fresh:
            if (batch.batch_size > caps.write_req_capacity or batch.num_tokens > caps.write_token_capacity or (
                    check_token and (exp is None or exp.flat.numel() > caps.expected_token_capacity))):
                caps.check_batch(batch, enable_verify_token=check_token)  # raises the rule's error, with its code
            if resized:
                runner.forget_kept(batch)  # resized in place: staged as a new batch, not into its old bucket
            self._checked[forward_index] = (batch, rows, tokens, snapshot)
        if check_token:
            assert exp is not None
            if runner.pinned is not None:  # the scatter reads the batch's rows: the pinned inputs copied first
                runner.pinned.flush()
            self._scatter_expected(runner, batch, exp.flat, exp.lens)
        self._prepared[forward_index] = True

    def _scatter_expected(self, runner: ForwardRunner, batch: CanaryBatch, flat: torch.Tensor,
                          lens: torch.Tensor) -> None:
        n, bs = int(flat.numel()), batch.batch_size  # it fits expected_token_capacity: prepare checked it
        pool = self.state.expected_tokens_pool
        assert pool is not None
        offsets = torch.zeros(bs + 1, dtype=torch.int64)
        torch.cumsum(lens, 0, out=offsets[1:])
        if bs and (int(offsets[bs]) != n or int(lens.min()) < 0):  # values changed in place since it was built
            check_expected_tokens(flat=flat, lens=lens)  # raises the rule's error, with its code
        valid = lens.clamp(max=int(pool.shape[1]))
        self._exp_h2d.copy(self._exp_dev, [flat, offsets, valid])  # one H2D for the whole snapshot
        dev = self._exp_dev
        rpi = runner.staging.load_expected(batch, dev[n + bs + 1 : n + 2 * bs + 1])
        launch_scatter_req_token_ids_kernel(flat_in=dev[:n], offsets=dev[n : n + bs + 1], req_pool_indices=rpi,
                                            pool_out=pool, backend=self._config.backend)

    def head(self, batch: CanaryBatch, *, forward_index: int = 0) -> None:
        """Before the forward (capturable): plan every group, HEAD verify then write, K then V. ``batch`` is the
        very object :meth:`prepare` accepted for this forward slot (another is refused before anything launches:
        its capacities and expected tokens were never checked)."""
        runner = self._forwards[0] if forward_index is _FIRST else self._runner(forward_index)
        prepared = self._prepared
        if not prepared[forward_index]:
            raise RuntimeError("kv-canary: head() called without prepare() for this forward; call prepare(batch) "
                               "on the host first (outside any CUDA graph)")
        accepted = self._checked[forward_index]  # what prepare() checked and scattered: this very batch
        if accepted is None or batch is not accepted[0]:
            raise ValueError("kv-canary: head(batch) must get the very batch prepare() accepted for this forward "
                             f"(forward_index {forward_index}), got another {type(batch).__name__}; call "
                             "prepare(batch) with it first")
        prepared[forward_index] = False
        self._pump.disarm()  # launches after a TAIL's read-back copy: the step's end copies again
        if runner.head(batch):  # on a bucket: no capture in progress (its own check)
            self.health.count(self._head_ids)
        else:
            self._count(self._head_ids)
        for observe in self._head_observers:
            observe(batch)

    def add_head_observer(self, observe: Callable[[CanaryBatch], None]) -> None:
        """Call ``observe(batch)`` after each :meth:`head` (so inside a captured forward too: it must only
        launch device work, e.g. the tensor-parallel digest of the records the HEAD just wrote)."""
        if not callable(observe):
            raise TypeError(f"kv-canary: add_head_observer: observe must be callable (observe(batch)), got "
                            f"{type(observe).__name__} {observe!r}")
        self._head_observers.append(observe)

    def tail(self, *, forward_index: int = 0) -> None:
        """After the forward (capturable): TAIL verify then write, with the fingerprint of the fresh KV."""
        runner = self._forwards[0] if forward_index is _FIRST else self._runner(forward_index)
        if runner.tail():  # on a bucket: as in :meth:`head`
            self.health.count(self._tail_ids)
        else:
            self._count(self._tail_ids)

    def _count(self, tags: tuple[int, ...]) -> None:
        """The watchdog's host count of an eager phase's launches (``tags``), unless a graph is being captured on
        the current stream (they run only when it is replayed). A forward that ran on a bucket saw no capture in
        progress (the bucket's own check): :meth:`head` and :meth:`tail` count it without asking again."""
        if not (self._on_cuda and torch._C._cuda_isCurrentStreamCapturing()):
            self.health.count(tags)
        elif self._pump_folded:
            self._unfold_readback()

    def _unfold_readback(self) -> None:
        """The engine captures the manager's launches into a graph of its own, which it replays without telling
        the manager: a replay between a bucketed TAIL and the step's end would write after that TAIL's read-back
        copy. From here on every step's end copies itself (the TAIL graphs with the copy are dropped)."""
        self._pump_folded = False
        for runner in self._forwards:
            runner.drop_readback()
        self._pump.disarm()

    def state_launched(self) -> None:
        """Say that device work touching the manager's state (:attr:`state`, the kernels of :attr:`endpoints`:
        the violation ring, its write index, the run counters) was launched outside :meth:`head`, :meth:`tail`
        and the sweep, e.g. a :class:`~kvcanary.distributed.TransferVerifier` verify. Anyone who launches on
        them must call it with the launch (before or after it), before :meth:`end_step`: a bucketed TAIL may
        already have queued the step's read-back copy, and this step's end then copies again (the copy sees
        the new rows)."""
        self._pump.disarm()

    @contextlib.contextmanager
    def forward(self, batch: CanaryBatch, *, forward_index: int = 0) -> Iterator[None]:
        """``with manager.forward(batch): model(...)``: prepare + head before the body, tail after it."""
        self.prepare(batch, forward_index=forward_index)
        try:
            self.head(batch, forward_index=forward_index)  # a HEAD observer may raise after the HEAD ran
            yield
            self.tail(forward_index=forward_index)
        except BaseException:  # the HEAD, the model or the TAIL raised: the forward ends, the step may too
            self.abort_forward(forward_index=forward_index)
            raise

    def abort_forward(self, *, forward_index: int = 0) -> None:
        """The forward of slot ``forward_index`` ends here without its TAIL (the engine's model raised between
        :meth:`head` and :meth:`tail`, or the engine gave up after :meth:`prepare`): its prepare and HEAD are
        forgotten, so :meth:`end_step` may end the step (it refuses while a HEAD waits for its TAIL) and the
        next forward of the slot starts with :meth:`prepare`. What the HEAD launched stays: its records were
        verified and written, and the step's end reads back whatever it recorded. Nothing to do when the slot
        has no forward open. ``manager.forward(batch)`` calls it when its body raises."""
        runner = self._forwards[0] if forward_index is _FIRST else self._runner(forward_index)
        self._prepared[forward_index] = False
        runner.abandon()

    # -- per step (host) --------------------------------------------------------------------------------
    def run_sweep(self, entries: SweepEntries | None = None) -> int:
        """Sweep now, over ``entries`` or what the sweep source returns; return the number of entries."""
        if not self._sweep.enabled:
            raise RuntimeError("kv-canary: run_sweep() needs config.sweep_interval > 0 (the SWEEP endpoints)")
        if entries is None:
            if self._sweep_source is None:
                raise RuntimeError("kv-canary: no sweep source attached; call set_sweep_source(walker) first")
            entries = self._sweep_source()
            if not isinstance(entries, SweepEntries):
                raise TypeError(f"kv-canary: the sweep source must return SweepEntries (the prefix cache's "
                                f"entries), got {type(entries).__name__} from {self._sweep_source!r}")
        elif not isinstance(entries, SweepEntries):
            raise TypeError(f"kv-canary: run_sweep(entries) must get SweepEntries (or None: the sweep source's), "
                            f"got {type(entries).__name__}")
        self._pump.disarm()
        n = self._sweep.run(entries, self.step)
        self._count(self._phase_ids[Phase.SWEEP])
        return n

    @property
    def sweep_passes(self) -> int:
        """How many sweeps have run (the stats line's ``sweep_passes``)."""
        return self._sweep.passes

    @overload
    def end_step(self) -> StepStats: ...

    @overload
    def end_step(self, *, stats: Literal[True]) -> StepStats: ...

    @overload
    def end_step(self, *, stats: Literal[False]) -> None: ...

    def end_step(self, *, stats: bool = True) -> StepStats | None:
        """After the step's forwards: sweep if due, start this step's D2H and report what the previous
        step's copy holds (so rows recorded in step ``s`` are reported at the end of step ``s + 1``,
        ``step_when_pumped = s + 1``), the health check, the stats line. Returns the stats.

        The usual step is a few comparisons beside the copy: the read-back's header says whether the previous
        copy holds anything the reporter has not seen (only then is a snapshot made and reported), and the
        sweep and the watchdog are looked at only on the steps they are due. ``stats=False``: the caller does
        not read the stats (returns None), so a step whose stats no sink hears and no stats line logs makes
        none (the same figures as ``end_step()``'s wherever they are made).

        A sweep source that raises (the engine's walker failed, or its entries broke their rules): the step
        still ends as usual (read-back, step count, guard, sinks), then the sweep's error is raised; the
        failed sweep counts as the due one, so the source is asked again at the next due step, not at every
        step. An error of the step's own end (RAISE mode, an adapter) is raised instead, the sweep's error
        its ``__context__``. Refused (a RuntimeError, nothing advanced) while a forward's :meth:`head` waits for
        its :meth:`tail`: :meth:`abort_forward` ends a forward whose model raised."""
        if stats is not True and stats is not False:
            raise TypeError(f"kv-canary: end_step(stats=...) must be True or False, got {type(stats).__name__} "
                            f"{stats!r}")
        for runner in self._forwards:
            if runner.headed:
                self._refuse_open_forward()
        s = self.step
        try:
            if s >= self._sweep.next_due and self._sweep_source is not None:
                self._sweep.schedule(s)  # a source that raises is asked again when the next sweep is due
                self.run_sweep()
        finally:  # the step ends whether or not the sweep raised (its error is raised after)
            made = self._end_step(s, stats)
        return made

    def _refuse_open_forward(self) -> None:
        """:meth:`end_step` while a forward's HEAD waits for its TAIL: refused before anything advances."""
        open_slots = [i for i, r in enumerate(self._forwards) if r.headed]
        raise RuntimeError(f"kv-canary: end_step() called between head() and tail() of forward slot(s) {open_slots}: "
                           f"the step ends after each forward's tail(forward_index=...); a forward whose model "
                           f"raised ends with abort_forward(forward_index=...)")

    def _end_step(self, s: int, stats: bool) -> StepStats | None:
        """:meth:`end_step` after the sweep: the retired graphs, the watchdog's mark, the read-back, the step
        count, the guard, the stats and the sinks."""
        for runner in self._forwards:  # graphs dropped while the engine captured its forward
            g = runner.graphs
            if g is not None and g.retired:
                g.release_retired()
        health = self.health
        if s >= self._mark_at:  # the check at s + 1 reads this step's mark, and only it
            self._mark_at = health.next_due(s + 2) - 1
            if health.due(s + 1):
                health.mark(s)
        pump, rep = self._pump, self.reporter
        head = pump.advance(s)
        seen = len(rep.events)
        try:
            if head is not None:
                if len(pump.rows) > seen or head[0] > rep.total or head[HEADER_SKIPPED] > rep.skipped_verifies:
                    rep.process(pump.last(), s)  # raise mode raises here: the step still ends
                if s >= self._check_at:
                    self._check_at = health.next_due(s + 1)
                    if health.due(s):
                        health.check(pump.last(), s)
        finally:
            self.step = s + 1
            try:
                if len(rep.events) > seen:
                    self._guard(rep.events[seen:], s)  # an adapter that raises: the sinks still hear the step
            finally:
                logged = self.step % self._config.stats_every == 0
                made: StepStats | None = None
                if stats or logged or self.sinks:
                    made = self._stats(s)
                    if self.sinks:
                        self._tell("on_step", made)
        if logged and made is not None:  # made whenever logged
            logger.info(made.line())
        return made if stats else None

    def flush(self, *, during_step: bool = False) -> list[ViolationEvent]:
        """Synchronously read the device state now and report anything new (end of a run; tests; evidence
        that must see the very step that recorded its rows). ``during_step``: called inside a step (after
        its :meth:`head`, before its :meth:`end_step`, e.g. from a HEAD observer): the rows are labelled with
        this step, which recorded them, and the sinks hear of the step's end from :meth:`end_step` only."""
        if not isinstance(during_step, bool):
            raise TypeError(f"kv-canary: flush(during_step=...) must be True or False, got "
                            f"{type(during_step).__name__} {during_step!r}")
        snap = self._pump.drain(self.step if during_step else self.step - 1, ended=not during_step)
        seen = len(self.reporter.events)
        try:
            return self.reporter.process(snap, self.step)
        finally:
            try:
                if len(self.reporter.events) > seen:
                    self._guard(self.reporter.events[seen:], self.step)
            finally:
                if self.sinks and not during_step:
                    self._tell("on_step", self._stats(max(self.step - 1, 0)))

    @property
    def events(self) -> list[ViolationEvent]:
        """Every violation reported so far, in ring order."""
        return self.reporter.events

    @property
    def total_violations(self) -> int:
        """Violations recorded so far as of the last snapshot read, including rows the ring dropped."""
        return self.reporter.total


def _block_size(name: str, value: object) -> None:
    """Refuse a block size (``set_adapter``'s ``name``) that is no positive int: the journal files each slot's
    events under ``slot // block size`` (a bool is no size)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"kv-canary: set_adapter: {name} must be an int (slots per block), got "
                        f"{type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"kv-canary: set_adapter: {name} must be a positive int (slots per block; 1 for a "
                         f"token-major pool), got {value}")

"""The per-forward path: plan, HEAD verify + write before the forward, TAIL verify + write after it.

Only launches and device-to-device copies happen here, never a host read of a device value, so on a GPU
``head`` and ``tail`` can be captured into the forward's CUDA graph (with a capture-safe backend). With
``compile=True`` the launches of each half (everything after staging the batch) run as one
``torch.compile(fullgraph=True, dynamic=True)`` graph of kvcanary operators. With the manager's own graphs
(``graphs``: :mod:`kvcanary.manager.graphs`) each half is padded to the forward's bucket and replayed from a
CUDA graph captured for it. While a graph is captured, each phase's V endpoints run on a second stream beside K's
(:attr:`ForwardRunner.branch`, :mod:`kvcanary.manager.branch`); eager forwards launch K then V in turn.

An SWA group's write seed that the LUT translates to 0 (its position has no SWA slot: evicted, or
overwritten by this very forward in an engine that keeps the window in a ring) starts the request's chain at
the anchor, without the chain-position assert, as a first chunk does: the write-side twin of verify skipping
slot 0 and of a predecessor 0 getting no chain check (:func:`restart_unslotted_seeds`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from kvcanary.consts import PoolKind
from kvcanary.extensions import Extensions, write_owner_on, write_slot_on
from kvcanary.launch.plan import launch_canary_plan_kernels
from kvcanary.launch.verify import launch_canary_verify_kernel
from kvcanary.launch.write import launch_canary_write_kernel
from kvcanary.manager.batch import CanaryBatch
from kvcanary.manager.branch import VBranch, split_halves
from kvcanary.manager.budget import BudgetFilter, VerifyBudget
from kvcanary.manager.buffers import CanaryBufferGroup
from kvcanary.manager.capacities import CanaryCapacities
from kvcanary.manager.endpoints import Endpoint, Phase
from kvcanary.manager.graphs import STAGED_AFTER, Bucket, ForwardGraphs
from kvcanary.manager.owners import OwnerMap
from kvcanary.manager.pinned import PinnedInputs
from kvcanary.manager.pump import SnapshotPump
from kvcanary.manager.rotation import LayerRotation
from kvcanary.manager.staging import StepStaging, StepViews
from kvcanary.manager.state import CanaryDeviceState
from kvcanary.plans import VerifyPlan, WritePlan

_HEAD = Phase.HEAD.value  # the graphs' names of the phases (an enum's value is a Python call to read)
_TAIL = Phase.TAIL.value
_STAGED = "head_staged"  # the graphs' name of a kept batch's HEAD with its staging copy (one batch at a time)
STAGED_LENGTHS = 4
"""Committed lengths of the pinned inputs whose copy a kept batch's staged HEAD graphs hold (per host buffer);
the copy of any other length is issued eagerly before the staged HEAD without it."""
_ptr, _size = torch.Tensor.data_ptr, torch.Tensor.size  # what a staged graph's parts are compared by
_Where = tuple[tuple[int, ...], tuple[torch.Size, ...]]
"""Where a batch's staging parts are: their data pointers and sizes."""


class _Staged(NamedTuple):
    """A kept batch's staged HEAD (made once per batch)."""

    where: _Where
    """Where its parts were when it was made: their data pointers and sizes."""
    run: Callable[[], None]
    """Its launches: the staging copy, then the bucket's HEAD launches."""
    views: StepViews
    """The views the launches fill."""
    parts: list[torch.Tensor]
    """The staging's kept parts the copy reads."""


def restart_unslotted_seeds(seeds: torch.Tensor, mask: torch.Tensor) -> None:
    """Set an SWA group's write seeds of 0 to -1, in place (``mask``: a bool scratch of the seeds' shape).

    0 is the LUT's "no SWA slot": the seed's position was evicted from the window, or, in an engine that keeps
    the window in a per-request ring (transformers), this forward's own chunk of ``window`` or more tokens
    overwrites its ring slot. Read as a slot, 0 would chain the request from the padding slot's record and
    assert its position (a false ``write_position``); -1 starts the chain at the anchor instead. A later verify
    of the chunk's first token sees the same 0 as its predecessor and skips the chain check, so the two agree.
    Two device ops, no host read (capturable)."""
    torch.eq(seeds, 0, out=mask)
    seeds.masked_fill_(mask, -1)


@dataclass(frozen=True)
class GroupPlans:
    """The plans of one group for one forward slot (HEAD and TAIL use the same plans)."""

    group: CanaryBufferGroup
    verify: VerifyPlan
    write: WritePlan
    head: tuple[Endpoint, ...]
    tail: tuple[Endpoint, ...]


class ForwardRunner:
    """One forward slot: its staging buffers and per-group plans."""

    def __init__(self, *, groups: list[CanaryBufferGroup], endpoints: list[Endpoint], state: CanaryDeviceState,
                 capacities: CanaryCapacities, req_to_token: torch.Tensor, token_offset: int,
                 check_token: bool, write_input_assert: bool, backend: str | None,
                 budget: VerifyBudget | None = None, extensions: Extensions | None = None,
                 rotations: list[LayerRotation | None] | None = None, compile: bool = False,
                 graphs: ForwardGraphs | None = None, owners: OwnerMap | None = None) -> None:
        dev = req_to_token.device
        swa = next((g for g in groups if g.kind is PoolKind.SWA), None)
        self.staging = StepStaging(capacities, dev, swa_lut=swa.swa_index_lut if swa else None,
                                   swa_num_slots=swa.num_slots if swa else 0, write_input_assert=write_input_assert)
        self.plans = [
            GroupPlans(
                group=g,
                verify=VerifyPlan.allocate(verify_capacity=capacities.verify_capacity, device=dev),
                write=WritePlan.allocate(write_req_capacity=capacities.write_req_capacity, device=dev),
                head=tuple(e for e in endpoints if e.kind is g.kind and e.phase is Phase.HEAD),
                tail=tuple(e for e in endpoints if e.kind is g.kind and e.phase is Phase.TAIL),
            )
            for g in groups
        ]
        rows = int(req_to_token.shape[0])
        self.budgets = [BudgetFilter(budget, num_rows=rows, device=dev,
                                     max_batch=capacities.write_req_capacity, backend=backend)
                        for _ in groups] if budget is not None else []
        """With a verification budget: per group, the filter whose smaller plan the step's verifies use."""
        self._verify = [gp.verify for gp in self.plans]
        self._seed_masks = [torch.zeros_like(gp.write.write_seed_slot_indices, dtype=torch.bool)
                            if gp.group.kind is PoolKind.SWA else None for gp in self.plans]
        """Per group: the scratch of :func:`restart_unslotted_seeds` (SWA groups), else None."""
        self._state = state
        self._r2t = req_to_token
        self._offset = token_offset
        self._check_token = check_token
        self._write_input_assert = write_input_assert
        self._backend = backend
        self._ext = extensions
        self._rotations = rotations or [None] * len(groups)
        self._owners = owners if write_owner_on(extensions) else None
        self._views: StepViews | None = None
        self.graphs = graphs
        """The HEAD and TAIL graphs per bucket (None: every forward runs unpadded and eagerly)."""
        self._bucket: Bucket | None = None
        self._last_head: tuple[CanaryBatch, Bucket, Callable[[], None], Callable[[], None]] | None = None
        """The previous bucketed forward's batch, its bucket and its HEAD and TAIL launches."""
        self._bucket_runs: dict[Bucket, tuple[Callable[[], None], Callable[[], None]]] = {}
        """Per bucket: its HEAD and TAIL launches on the bucket's views (what a first use runs and captures; made
        once, not per forward)."""
        self._tail_run: Callable[[], None] | None = None  # the current bucketed forward's TAIL launches
        self._reuses = 0  # forwards of the kept batch (``_last_head``) since its first one
        self._staged: _Staged | None = None
        """The kept batch's staged HEAD (:data:`~kvcanary.manager.graphs.STAGED_AFTER`): where its parts were at
        the capture, its launches, the views they fill and the parts; None before its reuses reach the threshold."""
        self.readback: SnapshotPump | None = None
        """The manager's read-back pump, when its TAIL graphs copy for it (the packed state, graphs on): set by the
        manager."""
        self._tail_runs: dict[Bucket, tuple[tuple[str, Callable[[], None]], ...]] = {}
        """Per bucket: the TAIL launches and the read-back copy, per pump host buffer (:meth:`_tail_copies`)."""
        self._staged_runs: dict[tuple[int, int], tuple[str, Callable[[], None]]] = {}
        """The kept batch's staged HEAD after the pinned inputs' copy, per (host buffer, length): at most
        :data:`STAGED_LENGTHS` lengths (a further one is copied eagerly before the plain staged HEAD)."""
        self.branch: VBranch | None = None
        """The manager's side stream for V's launches while a graph is captured (:mod:`kvcanary.manager.branch`):
        set by the manager on a CUDA device, unless compiled. None: every phase launches K then V in turn (what a
        benchmark sets to time the sequential graph)."""
        self.pinned: PinnedInputs | None = None
        """The slot's pinned host inputs (:meth:`CanaryManager.pinned_inputs`): their committed copy is issued
        first, in the staged graph or eagerly."""
        self._head_launches = self._plan_and_head
        self._tail_launches = self._tail
        if compile:
            self._head_launches = torch.compile(self._plan_and_head, fullgraph=True, dynamic=True)
            self._tail_launches = torch.compile(self._tail, fullgraph=True, dynamic=True)

    def head(self, batch: CanaryBatch) -> bool:
        """Stage the batch, plan every group, then HEAD verify and write (K, then V): replayed from the
        bucket's graph when the forward has one. The very batch of the previous bucketed forward (an engine
        that hands the same batch again) keeps its bucket and launches: only its staging copy and the replay
        run. The slot's pinned inputs' committed copy (:attr:`pinned`) comes first: inside the kept batch's
        staged graph (one per host buffer and committed length, up to :data:`STAGED_LENGTHS` lengths), else
        eagerly. Returns whether the forward runs on a bucket (then no
        graph capture is in progress on the current stream: the manager counts the launches without asking
        again)."""
        g = self.graphs
        last = self._last_head
        pinned = self.pinned
        if last is not None and last[0] is batch and g is not None and g.usable():
            _, kept, launches, tail = last
            self._bucket, self._tail_run = kept, tail
            self._reuses += 1
            if self._reuses >= STAGED_AFTER:
                staged = self._staged_for(batch, kept, launches)
                if staged is not None:
                    self._views = staged.views
                    name, run = _STAGED, staged.run
                    if pinned is not None and pinned.pending:  # the map's copy, a memcpy node of the graph
                        k, n = pinned.take()
                        with_copy = self._staged_runs.get((k, n)) or self._staged_h2d(staged, pinned, k, n)
                        if with_copy is None:  # a length past STAGED_LENGTHS: copied eagerly, in stream order
                            pinned.copy(k, n)()
                        else:
                            name, run = with_copy
                    g.run(name, kept, run)
                    return True
            if pinned is not None:
                pinned.flush()
            self._views = self.staging.load_padded(batch, kept.rows, kept.tokens)
            g.run(_HEAD, kept, launches)
            return True
        bs = batch.batch_size
        bucket: Bucket | None = None
        if g is not None:
            stride = self.budgets[0].budget.stride(bs) if self.budgets and bs > 0 else 0
            bucket = g.bucket(bs, batch.num_tokens, stride)
        self._bucket = bucket
        if self._staged is not None:  # a new batch: the previous one's staged graphs are done with
            self._drop_staged()
        if pinned is not None:
            pinned.flush()
        if bucket is None:
            v = self.staging.load(batch)
            self._views = v
            self._head_launches(v, bs)
            return False
        v = self.staging.load_padded(batch, bucket.rows, bucket.tokens)
        self._views = v
        head, tail = self._bucket_launches(bucket, v)
        self._tail_run = tail
        assert g is not None  # a bucket comes from the graphs
        g.run(_HEAD, bucket, head)
        self._last_head = (batch, bucket, head, tail)
        self._reuses = 0
        return True

    def forget_kept(self, batch: CanaryBatch) -> None:
        """``batch`` is no longer the kept one (the manager's :meth:`~kvcanary.manager.CanaryManager.prepare`
        saw its tensors resized in place since it was kept): its next :meth:`head` stages it as a new batch,
        into its own bucket, and its staged graphs are dropped there."""
        last = self._last_head
        if last is not None and last[0] is batch:
            self._last_head = None
        self.staging.forget(batch)

    def _staged_for(self, batch: CanaryBatch, bucket: Bucket, launches: Callable[[], None]) -> _Staged | None:
        """The kept batch's staged HEAD launches (its staging copy, then the bucket's HEAD launches) and the views
        they fill, made once per batch. The staged graph reads the batch's tensors at the addresses they had
        when it was captured: where they are (data pointers and sizes) is compared at every forward, and a batch
        whose tensors moved (storage swapped in place, the same sizes) gets a new staged graph. A batch resized
        in place never gets here: the manager's ``prepare`` compares its rows' and tokens' sizes with those it
        was accepted at and hands it on as a new batch (:meth:`forget_kept`). None: the staging holds another
        batch."""
        staged = self._staged
        if staged is not None:  # made for this batch (a new batch drops it): its parts are the staging's kept ones
            parts = staged.parts
            if staged.where == (tuple(map(_ptr, parts)), tuple(map(_size, parts))):
                return staged
            self._drop_staged()
        kept = self.staging.kept(batch, bucket.rows, bucket.tokens)
        if kept is None:
            return None
        parts, packed = kept
        where: _Where = (tuple(map(_ptr, parts)), tuple(map(_size, parts)))

        def run() -> None:
            torch.cat(parts, out=packed)
            launches()
        staged = self._staged = _Staged(where, run, self.staging.padded_views(bucket.rows, bucket.tokens), parts)
        return staged

    def _staged_h2d(self, staged: _Staged, pinned: PinnedInputs, k: int,
                    n: int) -> tuple[str, Callable[[], None]] | None:
        """The graph name and the launches of the kept batch's staged HEAD after the copy of ``pinned``'s host
        buffer ``k`` (``n`` values): a graph per host buffer, its first node a memcpy from the pinned buffer
        (made once per staged batch, buffer and length). None for a length past the :data:`STAGED_LENGTHS`
        the kept batch already has graphs for."""
        got = self._staged_runs.get((k, n))
        if got is None:
            lengths = {m for _, m in self._staged_runs}
            if n not in lengths and len(lengths) >= STAGED_LENGTHS:
                return None
            copy, launches = pinned.copy(k, n), staged.run

            def run() -> None:
                copy()
                launches()
            got = self._staged_runs[(k, n)] = (f"{_STAGED}/{k}/{n}", run)
        return got

    def _drop_staged(self) -> None:
        """Forget the kept batch's staged HEAD and its graphs (with and without the pinned inputs' copy)."""
        self._staged = None
        g = self.graphs
        if g is not None:
            g.drop(_STAGED)
            for name, _ in self._staged_runs.values():
                g.drop(name)
        self._staged_runs.clear()

    def _bucket_launches(self, bucket: Bucket, v: StepViews) -> tuple[Callable[[], None], Callable[[], None]]:
        """The bucket's HEAD and TAIL launches on its views (what a first use runs and captures; made on the
        bucket's first use, not per forward)."""
        runs = self._bucket_runs.get(bucket)
        if runs is None:
            def head() -> None:
                self.staging.translate(v)
                self._plan_and_head(v, bucket.rows, stride=bucket.stride or None)

            def tail() -> None:
                self._tail(v)
            runs = self._bucket_runs[bucket] = (head, tail)
        return runs

    def _plan_and_head(self, v: StepViews, batch_size: int, stride: int | None = None) -> None:
        """The HEAD launches after staging: the owner claim, then per group its plan, the overflow count (the
        budget's filter counts it itself) and the HEAD endpoints' verify and write (:meth:`_launch`). A plan that
        overflowed is counted here, with or without a budget, so a forward whose TAIL never runs counts alike.
        Under capture, V's endpoints fork after the group's plan and count (:meth:`_fork`)."""
        self._claim(v)
        fork = self._fork()
        for gi, gp in enumerate(self.plans):
            self._plan(gi, v)
            if self.budgets:
                self._filter(gi, v, batch_size, stride)
            else:
                self._count_skipped(gi)
            self._launch(gi, gp.head, v, fork)

    def _claim(self, v: StepViews) -> None:
        """The write-time owner check: free slots go to their first writer (nothing without the extension)."""
        if self._owners is not None:
            self._owners.claim(req_pool_indices=v.req_pool_indices, extend_lens=v.extend_lens,
                               out_cache_loc=v.out_cache_loc, swa_out_cache_loc=v.swa_out_cache_loc)

    def _plan(self, gi: int, v: StepViews) -> None:
        """Group ``gi``'s verify and write plans (one plan launch; an SWA group's unslotted seeds restarted)."""
        gp = self.plans[gi]
        g = gp.group
        pool = self._state.expected_tokens_pool if self._check_token else None
        launch_canary_plan_kernels(
            verify_plan_out=gp.verify, write_plan_out=gp.write, req_pool_indices=v.req_pool_indices,
            prefix_lens=v.prefix_lens, extend_seq_lens=v.extend_lens, req_to_token=self._r2t,
            swa_window_size=g.swa_window_size, full_to_swa_index_mapping=g.swa_index_lut,
            verify_capacity=gp.verify.verify_capacity, req_to_verify_expected_tokens=pool,
            req_to_verify_expected_tokens_valid_lens=v.valid_lens if pool is not None else None,
            kv_token_id_vs_position_offset=self._offset, extensions=self._ext, backend=self._backend)
        mask = self._seed_masks[gi]
        if mask is not None:
            restart_unslotted_seeds(gp.write.write_seed_slot_indices, mask)

    def _filter(self, gi: int, v: StepViews, batch_size: int, stride: int | None) -> None:
        """The verification budget's filter of group ``gi``'s plan: the step's verifies use the smaller plan. The
        same launch counts the full plan's overflow into ``skipped_verifies`` (so :meth:`_plan_and_head` launches
        no count of its own for the group)."""
        rot = self._rotations[gi]
        self._verify[gi] = self.budgets[gi].apply(self.plans[gi].verify, batch_size=batch_size,
                                                  req_pool_indices=v.req_pool_indices,
                                                  rounds=1 if rot is None else rot.num_sets, stride=stride,
                                                  skipped_verifies=self._state.skipped_verifies)

    def tail(self) -> bool:
        """TAIL verify and write with the real-KV sources, on the plans ``head`` built.
        Returns whether the forward ran on a bucket (its HEAD saw no graph capture in progress)."""
        v = self._views
        if v is None:
            raise RuntimeError("kv-canary: tail() called without a preceding head() for this forward slot")
        bucket = self._bucket
        pump = self.readback
        if bucket is None:
            self._tail_launches(v)
            if pump is not None:
                pump.disarm()
        else:
            assert self.graphs is not None and self._tail_run is not None
            if pump is None:
                self.graphs.run(_TAIL, bucket, self._tail_run)
            else:  # the TAIL graph ends with the read-back copy into the pump's next host buffer
                k = pump.next_index
                name, run = (self._tail_runs.get(bucket) or self._tail_copies(bucket, pump))[k]
                self.graphs.run(name, bucket, run)
                pump.arm(k)
        self._views = self._bucket = None
        return bucket is not None

    @property
    def headed(self) -> bool:
        """Whether this slot's HEAD ran and its TAIL has not (the step may not end yet: :meth:`abandon`)."""
        return self._views is not None

    def abandon(self) -> None:
        """Forget the forward whose HEAD ran and whose TAIL never will (the engine's model raised): its
        :meth:`tail` is refused from here on, until the next :meth:`head`. Its launches stay queued; the
        kept batch and its graphs stay (a later forward of the same batch replays them)."""
        self._views = self._bucket = None

    def drop_readback(self) -> None:
        """The TAIL copies nothing more for the read-back pump: forget the pump, the TAIL launches with its copy
        and their graphs (``tail/0``, ``tail/1``)."""
        self.readback = None
        self._tail_runs.clear()
        g = self.graphs
        if g is not None:
            for k in range(2):
                g.drop(f"{_TAIL}/{k}")

    def _tail_copies(self, bucket: Bucket, pump: SnapshotPump) -> tuple[tuple[str, Callable[[], None]], ...]:
        """Per pump host buffer: the graph name and the bucket's TAIL launches followed by the read-back copy into
        that buffer (made on the bucket's first use)."""
        runs = self._tail_runs.get(bucket)
        if runs is None:
            tail = self._tail_run
            assert tail is not None

            def with_copy(k: int) -> tuple[str, Callable[[], None]]:
                copy = pump.tail_copy(k)
                assert copy is not None and tail is not None

                def run() -> None:
                    tail()
                    copy()
                return f"{_TAIL}/{k}", run
            runs = self._tail_runs[bucket] = (with_copy(0), with_copy(1))
        return runs

    def _tail(self, v: StepViews) -> None:
        """The TAIL launches: per group the TAIL endpoints' verify and write and the layer rotation's TAIL (the
        overflow was counted at HEAD). Under capture, V's endpoints fork, except for a group with a rotation (its
        rows carry the TAIL_K tag: the read-back could not put them after V's again), and join before the
        rotation and the next group."""
        fork = self._fork()
        for gi, gp in enumerate(self.plans):
            self._launch(gi, gp.tail, v, fork and self._rotations[gi] is None)
            self._rotate(gi, v)

    def _rotate(self, gi: int, v: StepViews) -> None:
        """Group ``gi``'s layer rotation at TAIL (nothing without rotation)."""
        rot = self._rotations[gi]
        if rot is not None:
            gp = self.plans[gi]
            loc = v.swa_out_cache_loc if gp.group.kind is PoolKind.SWA else v.out_cache_loc
            assert loc is not None
            rot.tail(self._verify[gi], gp.write, input_ids=v.input_ids, positions=v.positions,
                     out_cache_loc=loc, backend=self._backend, extensions=self._ext)

    def _count_skipped(self, gi: int) -> None:
        """A plan that overflowed skipped its verifies: count it on the device (never read here). Without a budget
        only: a budget's filter counts it."""
        self._state.skipped_verifies.add_(1).sub_(self.plans[gi].verify.enable)

    def _fork(self) -> bool:
        """Whether this phase's V endpoints go on the side stream: a branch, a capture in progress on the current
        stream, and backends that append with atomics (:meth:`VBranch.usable`). One check per phase; none
        without a branch (a CPU manager, a compiled one)."""
        b = self.branch
        return b is not None and b.usable(self._backend)

    def _launch(self, gi: int, endpoints: tuple[Endpoint, ...], v: StepViews, fork: bool = False) -> None:
        """Each endpoint's verify (on the step's plan: the budget's when there is one) then its write; with
        ``fork``, the V endpoints' on the branch's stream beside K's, joined back before this returns."""
        main, side = split_halves(endpoints) if fork else (endpoints, ())
        if side:
            assert self.branch is not None
            self.branch.run(lambda: self._launch_each(gi, main, v), lambda: self._launch_each(gi, side, v),
                            int(main[0].tag) // 2)
            return
        self._launch_each(gi, endpoints, v)

    def _launch_each(self, gi: int, endpoints: tuple[Endpoint, ...], v: StepViews) -> None:
        """``endpoints`` in turn, on the current stream."""
        for ep in endpoints:
            self._verify_one(gi, ep)
            self._write_one(gi, ep, v)

    def _verify_one(self, gi: int, ep: Endpoint) -> None:
        launch_canary_verify_kernel(context=ep.context, plan=self._verify[gi],
                                    check_verify_expected_token=self._check_token, extensions=self._ext,
                                    backend=self._backend)

    def _write_one(self, gi: int, ep: Endpoint, v: StepViews) -> None:
        gp = self.plans[gi]
        loc = v.swa_out_cache_loc if gp.group.kind is PoolKind.SWA else v.out_cache_loc
        assert loc is not None
        slot_check = write_slot_on(self._ext)  # the write-slot check reads the batch's rows and the table
        owners = self._owners.slot_owner(gp.group.kind) if self._owners is not None else None
        launch_canary_write_kernel(
            context=ep.context, plan=gp.write, input_ids=v.input_ids, positions=v.positions, out_cache_loc=loc,
            enable_write_input_assert=self._write_input_assert, expected_input_tokens=v.expected_input_tokens,
            expected_input_positions=v.expected_input_positions,
            req_pool_indices=v.req_pool_indices if slot_check or owners is not None else None,
            req_to_token=self._r2t if slot_check else None,
            full_to_swa_index_mapping=gp.group.swa_index_lut if slot_check else None, slot_owner=owners,
            extensions=self._ext, backend=self._backend)

"""The sweep: verify every slot the prefix cache holds, including those no running request reads.

Eager and host-driven (never captured): the engine hands over its prefix-cache chains as
:class:`SweepEntries` (one entry per cached slot: slot, position in its chain, predecessor slot or -1);
the sweep fills its own plan, translating through the LUT for the SWA group, and launches the SWEEP
endpoints (verify only, on the TAIL buffers, with the real-KV sources, no token check). With the manager's
graphs on, those launches are captured once (after the first sweep ran them) and replayed by every later sweep:
the plans are fixed tensors and the verify kernel reads its entry count on the device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvcanary.constructors.sweep_entries import check_sweep_entries
from kvcanary.consts import INVALID_SLOT, PoolKind
from kvcanary.launch.verify import launch_canary_verify_kernel
from kvcanary.manager.buffers import CanaryBufferGroup
from kvcanary.manager.endpoints import Endpoint, Phase
from kvcanary.manager.graphs import Bucket, ForwardGraphs
from kvcanary.manager.h2d import HostStaging
from kvcanary.manager.staging import translate_slots
from kvcanary.plans import VerifyPlan


@dataclass(frozen=True)
class SweepEntries:
    """Host int64 tensors, one entry per cached slot, in full-pool slot space."""

    slots: torch.Tensor
    positions: torch.Tensor
    prev_slots: torch.Tensor

    @classmethod
    def from_lists(cls, slots: list[int], positions: list[int], prev_slots: list[int]) -> SweepEntries:
        """From Python lists: each cached slot, its position in its chain, its predecessor slot (-1: head)."""

        def t(x: list[int]) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.int64)

        return cls(t(slots), t(positions), t(prev_slots))

    def __post_init__(self) -> None:
        self.validate()

    def __len__(self) -> int:
        return int(self.slots.shape[0])

    def validate(self) -> None:
        """Three 1-D int64 tensors of one length (the rules: kvcanary/constructors/sweep_entries.py; they run at
        construction too)."""
        check_sweep_entries(slots=self.slots, positions=self.positions, prev_slots=self.prev_slots)


_NEVER = 1 << 62  # a step no run reaches

SWEEP_GRAPH = ("sweep", Bucket(1, 1))
"""The key of the sweep's one graph in its :class:`ForwardGraphs` (phase name, bucket)."""

SweepSource = Callable[[], SweepEntries]
"""Returns the prefix cache's entries when a sweep is due. Returning the very object of the previous sweep
says "unchanged" (its tensors must not have been modified): the runner then sweeps the entries it already
holds on the device, with no host-to-device copy."""


@dataclass
class _GroupSweep:
    group: CanaryBufferGroup
    plan: VerifyPlan
    endpoints: tuple[Endpoint, ...]


class SweepRunner:
    """Owns the sweep plans (allocated once) and decides when a sweep is due."""

    def __init__(self, *, groups: list[CanaryBufferGroup], endpoints: list[Endpoint], capacity: int,
                 interval: int, backend: str | None, graphs: ForwardGraphs | None = None) -> None:
        self.interval = interval
        self.graphs = graphs
        """The graph the sweep's verify launches are replayed from (the manager's ``graphs`` setting), or None:
        every sweep launches them."""
        self.capacity = capacity
        self.passes = 0
        self.next_due = _NEVER if interval <= 0 else -_NEVER
        """The first step at which a sweep is due (:meth:`due`; one comparison per step for the manager)."""
        self._backend = backend
        dev = groups[0].k_head.device
        self._groups: list[_GroupSweep] = []
        for g in groups:
            plan = VerifyPlan.allocate(verify_capacity=capacity, device=dev)
            plan.verify_expected_tokens.fill_(-1)
            eps = tuple(e for e in endpoints if e.kind is g.kind and e.phase is Phase.SWEEP)
            self._groups.append(_GroupSweep(g, plan, eps))
        self._h2d = HostStaging(3 * capacity, dev)
        self._dev = torch.zeros(3 * capacity, dtype=torch.int64, device=dev)
        self._tmp = torch.zeros(capacity, dtype=torch.int64, device=dev)
        self._mask = torch.zeros(capacity, dtype=torch.bool, device=dev)
        self._invalid = torch.full((1,), INVALID_SLOT, dtype=torch.int64, device=dev)
        self._loaded: SweepEntries | None = None  # the entries the plans hold (one chunk), to sweep again as is
        self._cut: tuple[int, torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # n, slots, positions, prevs

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    def due(self, step: int) -> bool:
        """First evaluation, then every ``interval`` steps (SGLang's ``_last_sweep_step = -1`` rule: a run at
        step ``s >= 0`` makes the next due at ``s + interval``; one at a negative step leaves it due)."""
        return step >= self.next_due

    def run(self, entries: SweepEntries, step: int) -> int:
        """Verify ``entries`` on every group's SWEEP endpoints; return how many entries were swept.

        More entries than the capacity (a cache bigger than the pool: itself a sign of a corrupted tree)
        are swept in several passes over the same plan, never dropped."""
        reuse = entries is self._loaded
        if not reuse:  # the entries the plans hold were checked when they were loaded
            entries.validate()
        n = len(entries)
        for start in range(0, max(n, 1), self.capacity):
            self._run_chunk(entries, start, min(n, start + self.capacity), reuse=reuse)
        self._loaded = entries if n <= self.capacity else None
        self.passes += 1
        self.schedule(step)
        return n

    def schedule(self, step: int) -> None:
        """Count a sweep at ``step`` as run for the schedule (:meth:`due`): what :meth:`run` does after its
        launches, and what the manager does before asking its source, so a source that raises is asked again
        at the next due step rather than at every step."""
        self.next_due = _NEVER if not self.enabled else -_NEVER if step < 0 else step + self.interval

    def _run_chunk(self, entries: SweepEntries, start: int, end: int, *, reuse: bool) -> None:
        """Sweep ``entries[start:end]``; ``reuse``: the plans already hold them (only the SWA translation,
        whose table moves with the engine's window, is redone)."""
        n = end - start
        if not reuse:
            parts = [entries.slots, entries.positions, entries.prev_slots]
            self._h2d.copy(self._dev, parts if n == len(entries) else [t[start:end] for t in parts])
        cut = self._cut
        if cut is None or cut[0] != n:  # the same length as the previous chunk (a reused sweep): its slices
            cut = self._cut = (n, self._dev[:n], self._dev[n : 2 * n], self._dev[2 * n : 3 * n])
        _, slots, positions, prevs = cut
        for gs in self._groups:
            p = gs.plan
            swa = gs.group.kind is PoolKind.SWA and gs.group.swa_index_lut is not None
            if not reuse:
                p.verify_slot_indices[:n].copy_(slots)
                p.verify_expected_positions[:n].copy_(positions)
                p.verify_prev_slot_indices[:n].copy_(prevs)
                p.verify_num_valid.fill_(n)  # (its enable is 1 from the allocation on: nothing else writes it)
            if swa:
                assert gs.group.swa_index_lut is not None
                for arr, full in ((p.verify_slot_indices, slots), (p.verify_prev_slot_indices, prevs)):
                    translate_slots(full, gs.group.swa_index_lut, out=arr[:n], tmp=self._tmp[:n],
                                    mask=self._mask[:n], oob=self._invalid)
        if self.graphs is None:
            self._launches()
        else:  # the plans are fixed tensors and the kernels read their counts on the device: one graph serves all
            self.graphs.run(SWEEP_GRAPH[0], SWEEP_GRAPH[1], self._launches)

    def _launches(self) -> None:
        """Every group's SWEEP verifies, on the plans as filled (each group's after every group's plan is: a
        group's verify reads only its own plan)."""
        for gs in self._groups:
            for ep in gs.endpoints:
                launch_canary_verify_kernel(context=ep.context, plan=gs.plan, check_verify_expected_token=False,
                                            backend=self._backend)

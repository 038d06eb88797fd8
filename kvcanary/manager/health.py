"""The watchdog: a canary that silently stops running must fail loudly.

Two checks on the pump's (delayed) snapshot, so neither costs a device sync: after warmup every active tag's
``kernel_run_counter`` must be > 0 (SGLang's message, word for word), and at each later check it must have
grown since the previous one for every tag the manager launched in between (counted on the host as the
launches are issued; launches issued while a CUDA graph is being captured are not counted, since they only
run when the graph is replayed, which the host does not see)."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from kvcanary.consts import NUM_LAUNCH_TAGS, CanaryLaunchTag
from kvcanary.manager.pump import HostSnapshot


class HealthChecker:
    """After ``warmup`` steps and every ``every`` steps: the counters are > 0, and have grown for every tag
    issued since the previous check."""

    def __init__(self, active_tags: list[CanaryLaunchTag], *, warmup: int, every: int) -> None:
        self.active_tags = list(active_tags)
        self.warmup = warmup
        self.every = every
        self.checks = 0
        self.failure: str | None = None
        """The message of the check that failed (the watchdog stays failed), or None."""
        self.issued = [0] * NUM_LAUNCH_TAGS
        """Launches issued per tag (host count), outside CUDA-graph capture."""
        self._marks: dict[int, tuple[int, ...]] = {}  # step -> issued counts when its snapshot was started
        self._last: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None  # step, counters, issued

    def launched(self, tags: Iterable[CanaryLaunchTag], device: torch.device) -> None:
        """Count one launch of each of ``tags`` (not while the current stream is capturing a graph)."""
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return
        self.count(tuple(int(t) for t in tags))

    def count(self, tag_ids: tuple[int, ...]) -> None:
        """Count one launch of each tag of ``tag_ids`` (``int(tag)``); the caller has checked that no graph is
        being captured (the manager's head and tail, which know their tags once)."""
        issued = self.issued
        for i in tag_ids:
            issued[i] += 1

    def mark(self, step: int) -> None:
        """The issued counts as of the snapshot the pump starts for ``step`` (the device copy is enqueued after
        every launch issued so far). A check reads only the mark of the step whose snapshot it checks, the one
        before it: the manager marks just those steps."""
        self._marks[step] = tuple(self.issued)

    def due(self, step: int) -> bool:
        return step >= self.warmup and (step - self.warmup) % self.every == 0

    def next_due(self, step: int) -> int:
        """The first step at or after ``step`` that is :meth:`due` (the manager's steps in between skip the
        watchdog entirely)."""
        if step <= self.warmup:
            return self.warmup
        return step + (self.warmup - step) % self.every

    @property
    def state(self) -> str:
        """``warmup`` (no check yet), ``ok`` or ``failed`` (a check raised)."""
        return "failed" if self.failure is not None else "ok" if self.checks else "warmup"

    def check(self, snap: HostSnapshot, step: int) -> None:
        try:
            self._check(snap, step)
        except RuntimeError as err:
            self.failure = str(err)
            raise

    def _check(self, snap: HostSnapshot, step: int) -> None:
        self.checks += 1
        counters = tuple(snap.kernel_run_counters)
        dead = [t for t in self.active_tags if counters[int(t)] == 0]
        if dead:
            names = ", ".join(t.name for t in dead)
            raise RuntimeError(f"kv-canary: kernel_run_counter is zero after warmup for tags=[{names}] at step={step}; "
                               "canary path is not executing")
        issued = self._marks.get(snap.step)
        for old in [s for s in self._marks if s <= snap.step]:
            del self._marks[old]
        if issued is None:
            return
        last, self._last = self._last, (snap.step, counters, issued)
        if last is None:
            return
        since, was, was_issued = last
        stalled = [t for t in self.active_tags
                   if counters[int(t)] == was[int(t)] and issued[int(t)] > was_issued[int(t)]]
        if stalled:
            names = ", ".join(t.name for t in stalled)
            launches = max(issued[int(t)] - was_issued[int(t)] for t in stalled)
            raise RuntimeError(f"kv-canary: kernel_run_counter has not advanced for tags=[{names}] from step={since} "
                               f"to step={snap.step}, over {launches} launches issued; canary path is not executing")

"""The canary's health, for an engine's readiness endpoint: ``ok``, ``degraded`` or ``failed``.

``degraded``: violations were seen (the canary works and found corrupt KV; the instance may still serve).
``failed``: the canary can no longer vouch for anything: the watchdog found a tag that stopped running, or
the violation ring overflowed (rows were counted but lost). Both are sticky for the life of the sink: a
corruption seen once is evidence an operator should look at, whatever happens next.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kvcanary.guard.decision import GuardDecision
from kvcanary.manager.reporter import ViolationEvent
from kvcanary.manager.stats import StepStats
from kvcanary.monitor.sources import SourceTable, latest, worst_watchdog

HEALTH_SCHEMA = "kvcanary.health/1"
"""The version of :meth:`CanaryHealth.to_dict`'s layout (a field is only ever added under the same version)."""


class HealthState(str, Enum):
    """Worst first in :data:`SEVERITY`: ``failed`` > ``degraded`` > ``ok``."""

    OK = "ok"
    DEGRADED = "degraded"
    FAILED = "failed"


SEVERITY = {HealthState.OK: 0, HealthState.DEGRADED: 1, HealthState.FAILED: 2}


@dataclass(frozen=True)
class CanaryHealth:
    """A point-in-time status: the state, the reasons for it, and the figures behind them."""

    state: HealthState
    reasons: tuple[str, ...]
    step: int
    violations: int
    dropped_rows: int
    watchdog: str
    requests_failed: int
    blocks_quarantined: int

    @property
    def ready(self) -> bool:
        """Whether a readiness probe should pass: ``ok`` and ``degraded`` serve, ``failed`` does not."""
        return self.state is not HealthState.FAILED

    @property
    def http_status(self) -> int:
        """200 while :attr:`ready`, else 503 (what a health route returns)."""
        return 200 if self.ready else 503

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form (``json.dumps(health.to_dict())``)."""
        return {"schema": HEALTH_SCHEMA, "state": self.state.value, "ready": self.ready,
                "reasons": list(self.reasons), "step": self.step, "violations": self.violations,
                "dropped_rows": self.dropped_rows, "watchdog": self.watchdog,
                "requests_failed": self.requests_failed, "blocks_quarantined": self.blocks_quarantined}


class HealthSink:
    """A :class:`~kvcanary.guard.GuardSink` that keeps what the status needs; :meth:`status` builds it.

    Per step it keeps the step's stats as their manager's latest (:mod:`kvcanary.monitor.sources`: one sink
    may hear several managers), so it costs next to nothing while nothing fires. The status counts every
    manager heard: the dropped rows of all, the watchdog's worst state among those still stepping (``failed``
    sticky). Thread-safe for one writer (the engine's step) and any number of readers (HTTP handlers).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources = SourceTable(self._retire, self._restore)
        self._violations = 0
        self._first: ViolationEvent | None = None
        self._failed = 0
        self._quarantined = 0
        self._watchdog_error: str | None = None
        self._dropped = 0

    # -- GuardSink ----------------------------------------------------------------------------------------
    def on_violations(self, events: Sequence[ViolationEvent]) -> None:
        with self._lock:
            self._violations += len(events)
            if self._first is None and events:
                self._first = events[0]

    def on_decision(self, decision: GuardDecision) -> None:
        with self._lock:
            self._failed += len(decision.fail)
            self._quarantined += len(decision.quarantine) + len(decision.quarantine_swa)

    def on_step(self, stats: StepStats) -> None:
        if stats.watchdog_error is not None and self._watchdog_error is None:  # sticky, across managers
            self._watchdog_error = stats.watchdog_error  # before the stats: a status seeing them sees it
        if not self._sources.put(stats, ()):  # a step of a manager heard before: one assignment, no lock
            with self._lock:  # a new manager: what it retires moves into the base as a status reads them
                self._sources.admit(stats, ())

    def _retire(self, last: StepStats) -> None:
        """A source left the table (replaced, or the least recently heard of too many): keep its dropped
        rows (the caller holds the lock)."""
        self._dropped += last.dropped_rows

    def _restore(self, last: StepStats) -> None:
        """A source retired as the least recently heard steps again: its new stats carry the dropped rows
        :meth:`_retire` kept (the caller holds the lock)."""
        self._dropped -= last.dropped_rows

    # -- the status ---------------------------------------------------------------------------------------
    def status(self) -> CanaryHealth:
        """The state now, with its reasons (``ok`` before the first step)."""
        with self._lock:  # every source's stats with the dropped rows folded from those that left
            table = self._sources
            kept = table.entries()
            error = self._watchdog_error  # read after the stats: it is set before them
            dropped = self._dropped + sum([e[0].dropped_rows for e in kept])
            live = [e[0].watchdog for e in kept if table.live(e)]
            violations, first, failed, quarantined = self._violations, self._first, self._failed, self._quarantined
        last = latest(kept)
        watchdog = "failed" if error is not None else worst_watchdog(live)
        reasons: list[str] = []
        state = HealthState.OK
        if error is not None:
            state = HealthState.FAILED
            reasons.append(f"watchdog: {error}")
        if dropped:
            state = HealthState.FAILED
            reasons.append(f"ring overflow: {dropped} violation row(s) counted but not kept; raise "
                           "CanaryConfig.ring_capacity")
        if violations:
            if state is HealthState.OK:
                state = HealthState.DEGRADED
            assert first is not None
            v = first.violation
            reasons.append(f"{violations} violation(s) seen; first: {v.tag_name} "
                           f"{'+'.join(v.reason_labels) or 'none'} at slot {v.slot_idx} position {v.position} "
                           f"(step {first.step_recorded})")
        if failed or quarantined:
            reasons.append(f"isolation: {failed} request(s) failed, {quarantined} block(s) quarantined")
        return CanaryHealth(state=state, reasons=tuple(reasons), step=last.step if last is not None else -1,
                            violations=violations, dropped_rows=dropped, watchdog=watchdog,
                            requests_failed=failed, blocks_quarantined=quarantined)

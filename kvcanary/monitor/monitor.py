"""One sink for an engine: health, JSON events and (optionally) Prometheus metrics, fed by its managers.

``monitor = Monitor(registry=my_registry); manager.add_sink(monitor)`` (or ``canary.add_sink(monitor)`` on
the transformers integration), then ``monitor.status()`` for the readiness route. See docs/monitoring.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvcanary.guard.decision import GuardDecision
from kvcanary.manager.reporter import ViolationEvent
from kvcanary.manager.stats import StepStats
from kvcanary.monitor.events import EventSink, Owners, check_owners
from kvcanary.monitor.health import CanaryHealth, HealthSink
from kvcanary.monitor.registry import check_registry

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from kvcanary.monitor.metrics import MetricsSink


class Monitor:
    """Health (always), JSON events (``events``) and Prometheus metrics (``metrics``, on ``registry``; needs
    ``prometheus-client``). ``owners`` names the engine requests that held a violation's slot."""

    def __init__(self, *, metrics: bool = True, registry: CollectorRegistry | None = None, events: bool = True,
                 owners: Owners | None = None) -> None:
        for name, flag in (("metrics", metrics), ("events", events)):
            if not isinstance(flag, bool):
                raise TypeError(f"kv-canary: Monitor: {name} must be a bool, got {type(flag).__name__} {flag!r}")
        check_owners(owners, "Monitor")
        check_registry(registry, "Monitor")  # every argument before anything is built or registered
        self.health = HealthSink()
        self.events = EventSink(owners=owners) if events else None
        self.metrics: MetricsSink | None = None
        if metrics:
            from kvcanary.monitor.metrics import MetricsSink

            self.metrics = MetricsSink(registry=registry, health=self.health)
        self._sinks = [s for s in (self.health, self.events, self.metrics) if s is not None]
        self._steppers = [s for s in (self.health, self.metrics) if s is not None]  # the events need no steps

    def status(self) -> CanaryHealth:
        """The canary's health now (:class:`~kvcanary.monitor.health.CanaryHealth`)."""
        return self.health.status()

    def close(self) -> None:
        """Take the metrics off their registry."""
        if self.metrics is not None:
            self.metrics.unregister()

    def on_violations(self, events: Sequence[ViolationEvent]) -> None:
        for s in self._sinks:
            s.on_violations(events)

    def on_decision(self, decision: GuardDecision) -> None:
        for s in self._sinks:
            s.on_decision(decision)

    def on_step(self, stats: StepStats) -> None:
        for s in self._steppers:
            s.on_step(stats)

"""What an operator sees of the canary: Prometheus metrics, structured JSON events, a health status.

Each is a :class:`~kvcanary.guard.GuardSink` (``manager.add_sink(sink)``); :class:`Monitor` bundles them.
Metrics need ``pip install 'kvcanary[metrics]'``; nothing here imports prometheus-client until metrics are
asked for. See docs/monitoring.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcanary.monitor.events import EVENT_SCHEMA, EventSink, JsonFormatter, decision_event, violation_event
    from kvcanary.monitor.health import CanaryHealth, HealthSink, HealthState
    from kvcanary.monitor.metrics import MetricsSink
    from kvcanary.monitor.monitor import Monitor

__all__ = ["EVENT_SCHEMA", "CanaryHealth", "EventSink", "HealthSink", "HealthState", "JsonFormatter", "MetricsSink",
           "Monitor", "decision_event", "violation_event"]

if not TYPE_CHECKING:  # hidden from type checkers, which would otherwise accept any attribute
    from kvcanary._lazy import attach

    __getattr__, __dir__ = attach(__name__, globals(), __all__)

"""Prometheus metrics of the canary (``pip install 'kvcanary[metrics]'``: the standard ``prometheus-client``).

:class:`MetricsSink` is a :class:`~kvcanary.guard.GuardSink` and a Prometheus collector at once. Per step
it keeps a reference to the step's stats and compares two counters (the sweep tags'), nothing more; the
figures are computed when Prometheus scrapes, from the last stats (the device counters the read-back
copies), the violation rows and the isolation decisions: one source of truth, no per-step cost. The names
follow Prometheus' conventions: a ``kvcanary_`` prefix, ``_total`` counters, base units, and labels of low
cardinality (a launch tag, a check, a fail-reason combination, a pool group, a code; never a request id or a
slot). Every metric is listed, with example alerts, in docs/monitoring.md.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from kvcanary.consts import NUM_LAUNCH_TAGS, CanaryLaunchTag
from kvcanary.guard.decision import GuardDecision
from kvcanary.manager.reporter import ViolationEvent
from kvcanary.manager.stats import StepStats
from kvcanary.monitor.health import HealthSink
from kvcanary.monitor.registry import check_registry
from kvcanary.violations import canary_kind

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

PREFIX = "kvcanary"
WATCHDOG_STATES = ("warmup", "ok", "failed")
_SWEEP_TAGS = {"full": CanaryLaunchTag.SWEEP_K_FULL, "swa": CanaryLaunchTag.SWEEP_K_SWA}
_SWEEP_INDEX = tuple((group, int(tag)) for group, tag in _SWEEP_TAGS.items())
_SWEEP_V = {"full": CanaryLaunchTag.SWEEP_V_FULL, "swa": CanaryLaunchTag.SWEEP_V_SWA}


def require_prometheus() -> Any:
    """The ``prometheus_client`` module, or an ImportError that says how to install it."""
    try:
        import prometheus_client
    except ImportError:
        raise ImportError("kv-canary: metrics need prometheus-client; install it with "
                          "pip install 'kvcanary[metrics]'") from None
    return prometheus_client


class MetricsSink:
    """Collects kvcanary's metrics and registers them on ``registry`` (default: prometheus-client's global
    ``REGISTRY``, so an engine that already exports metrics serves kvcanary's on the same endpoint).

    ``health`` (optional: a :class:`~kvcanary.monitor.health.HealthSink`) adds ``kvcanary_health_state``.
    One sink follows one engine cache at a time: when the stats come from a new canary manager (another
    ``StepStats.source``; or, for stats made outside a manager, a step count that went back), the counters go
    on from the old manager's totals instead of falling back.
    """

    def __init__(self, *, registry: CollectorRegistry | None = None, health: HealthSink | None = None) -> None:
        check_registry(registry, "MetricsSink")
        if health is not None and not isinstance(health, HealthSink):
            raise TypeError("kv-canary: MetricsSink: health must be a HealthSink or None, got "
                            f"{type(health).__name__} {health!r}")
        pc = require_prometheus()
        self._lock = threading.Lock()
        self._stats: StepStats | None = None
        self._base_launches = [0] * NUM_LAUNCH_TAGS
        self._base_slots = [0] * NUM_LAUNCH_TAGS
        self._base_dropped = 0
        self._base_skipped = 0
        self._base_steps = 0
        self._violations: Counter[tuple[str, str, str]] = Counter()
        self._failed: Counter[tuple[str, str]] = Counter()
        self._quarantined = 0
        self._finished = 0
        self._decisions = 0
        self._sweep_count = dict.fromkeys(_SWEEP_TAGS, 0)
        self._sweep_step = dict.fromkeys(_SWEEP_TAGS, 0)
        self.health = health
        self.registry = registry if registry is not None else pc.REGISTRY
        self.registry.register(self)

    def unregister(self) -> None:
        """Take the metrics off the registry (a test, a restart inside one process)."""
        self.registry.unregister(self)

    # -- GuardSink ----------------------------------------------------------------------------------------
    def on_violations(self, events: Sequence[ViolationEvent]) -> None:
        with self._lock:
            for e in events:
                v = e.violation
                self._violations[(v.tag_name, canary_kind(v.kernel_kind), "+".join(v.reason_labels) or "none")] += 1

    def on_decision(self, decision: GuardDecision) -> None:
        if decision.empty:  # the manager hands the adapter only non-empty decisions; the sinks hear every one
            return
        with self._lock:
            self._decisions += 1
            for f in decision.fail:
                self._failed[(f.code, f.alias or "")] += 1
            self._quarantined += len(decision.quarantine) + len(decision.quarantine_swa)
            self._finished += len(decision.finished)

    def on_step(self, stats: StepStats) -> None:
        last = self._stats
        if last is not None and stats.from_new_manager(last):
            with self._lock:  # the base and the stats change together: a scrape sees both or neither
                self._retire(last)
                self._stats = stats
        else:
            self._stats = stats
        counters = stats.kernel_run_counters
        if counters:
            seen = self._sweep_count
            for group, i in _SWEEP_INDEX:  # sweep age: the step the device last counted a sweep launch
                if counters[i] != seen[group]:
                    seen[group] = counters[i]
                    self._sweep_step[group] = stats.snapshot_step or 0

    def _retire(self, last: StepStats) -> None:
        """A new manager began: fold the old one's cumulative device counters into the base (the caller holds
        the lock)."""
        for i, c in enumerate(last.kernel_run_counters):
            self._base_launches[i] += c
        for i, c in enumerate(last.slot_run_counters):
            self._base_slots[i] += c
        self._base_dropped += last.dropped_rows
        self._base_skipped += last.skipped_verifies
        self._base_steps += last.step + 1
        self._sweep_count = dict.fromkeys(_SWEEP_TAGS, 0)
        self._sweep_step = dict.fromkeys(_SWEEP_TAGS, 0)

    # -- the collector ------------------------------------------------------------------------------------
    def describe(self) -> list[Metric]:
        return list(self._families(describing=True))

    def collect(self) -> Iterator[Metric]:
        return self._families(describing=False)

    def _families(self, *, describing: bool) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:  # the stats with the base they go with (a new manager swaps both under the lock)
            latest = self._stats
            stats = None if describing else latest
            launches = list(self._base_launches)
            slots = list(self._base_slots)
            dropped, skipped, steps = self._base_dropped, self._base_skipped, self._base_steps
            violations = dict(self._violations)
            failed = dict(self._failed)
            quarantined, finished, decisions = self._quarantined, self._finished, self._decisions
            sweep_step = dict(self._sweep_step)
        describe = latest is None
        tags: tuple[CanaryLaunchTag, ...] = ()
        if stats is not None:
            for i, c in enumerate(stats.kernel_run_counters):
                launches[i] += c
            for i, c in enumerate(stats.slot_run_counters):
                slots[i] += c
            dropped += stats.dropped_rows
            skipped += stats.skipped_verifies
            steps += stats.step + 1
            tags = stats.tags

        v = CounterMetricFamily(f"{PREFIX}_violations", "Violation rows read back from the device ring, by launch "
                                "tag, check and fail-reason combination", labels=["launch_tag", "check", "fail_reason"])
        for (tag_name, check, reason), n in sorted(violations.items()):
            v.add_metric([tag_name, check, reason], n)
        yield v
        yield CounterMetricFamily(f"{PREFIX}_violation_rows_dropped", "Violation rows counted after the ring was "
                                  "full (ring overflow): recorded on the device but not kept", value=dropped)
        lf = CounterMetricFamily(f"{PREFIX}_launches", "Canary kernel launches the device counted, by launch tag "
                                 "(a verify and a write launch of one tag both count)", labels=["launch_tag"])
        sf = CounterMetricFamily(f"{PREFIX}_slots_checked", "Slots the device verified or wrote, by launch tag "
                                 "(HEAD and TAIL tags verify and write, SWEEP tags only verify)", labels=["launch_tag"])
        for t in tags:
            lf.add_metric([t.name], launches[int(t)])
            sf.add_metric([t.name], slots[int(t)])
        yield lf
        yield sf
        yield CounterMetricFamily(f"{PREFIX}_verifies_skipped", "Per-forward verifies skipped because a plan "
                                  "overflowed its capacity", value=skipped)
        yield CounterMetricFamily(f"{PREFIX}_steps", "Engine steps the canary ended (end_step calls)", value=steps)
        age = GaugeMetricFamily(f"{PREFIX}_sweep_age_steps", "Steps since the device last counted a sweep of the "
                                "pool group (as of the last read-back)", labels=["group"])
        for group, sweep_tag in _SWEEP_TAGS.items():
            if sweep_tag in tags or _SWEEP_V[group] in tags:
                snap = stats.snapshot_step if stats is not None and stats.snapshot_step is not None else 0
                age.add_metric([group], max(0, snap - sweep_step[group]))
        yield age
        wd = GaugeMetricFamily(f"{PREFIX}_watchdog_state", "The kernel-run-counter watchdog's state (1 for the "
                               "current one): warmup, ok, failed", labels=["state"])
        current = stats.watchdog if stats is not None else "warmup"
        if self.health is not None:
            current = self.health.status().watchdog
        for s in WATCHDOG_STATES:
            wd.add_metric([s], 1.0 if s == current else 0.0)
        yield wd
        rb = GaugeMetricFamily(f"{PREFIX}_readback_delay_steps", "Steps between the step that ended last and the "
                               "device state the host last read (the read-back is one step behind)")
        delay = stats.readback_delay if stats is not None else None
        if delay is not None:
            rb.add_metric([], delay)
        yield rb
        rf = CounterMetricFamily(f"{PREFIX}_requests_failed", "Requests the isolation policy failed, by catalog "
                                 "code (kvcanary explain CODE) and the code's older alias", labels=["code", "alias"])
        for (code, alias), n in sorted(failed.items()):
            rf.add_metric([code, alias], n)
        yield rf
        yield CounterMetricFamily(f"{PREFIX}_blocks_quarantined", "KV blocks the isolation policy quarantined, "
                                  "full-attention and sliding-window pools together", value=quarantined)
        yield CounterMetricFamily(f"{PREFIX}_finished_requests_affected", "Requests that had read a corrupt slot but "
                                  "finished before the violation was read back (reported, not failed)", value=finished)
        yield CounterMetricFamily(f"{PREFIX}_isolation_decisions", "Isolation decisions handed to the engine",
                                  value=decisions)
        if self.health is not None:
            hf = GaugeMetricFamily(f"{PREFIX}_health_state", "The canary's health (1 for the current state): ok, "
                                   "degraded (violations seen), failed (watchdog or ring overflow)", labels=["state"])
            state = "ok" if describe else self.health.status().state.value
            for s in ("ok", "degraded", "failed"):
                hf.add_metric([s], 1.0 if s == state else 0.0)
            yield hf

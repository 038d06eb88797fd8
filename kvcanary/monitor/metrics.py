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
from kvcanary.monitor.sources import SourceTable, worst_watchdog
from kvcanary.violations import canary_kind

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

PREFIX = "kvcanary"
WATCHDOG_STATES = ("warmup", "ok", "failed")
_SWEEP_TAGS = {"full": CanaryLaunchTag.SWEEP_K_FULL, "swa": CanaryLaunchTag.SWEEP_K_SWA}
_SWEEP_V = {"full": CanaryLaunchTag.SWEEP_V_FULL, "swa": CanaryLaunchTag.SWEEP_V_SWA}
_SWEEP_FULL, _SWEEP_SWA = int(CanaryLaunchTag.SWEEP_K_FULL), int(CanaryLaunchTag.SWEEP_K_SWA)
_NO_SWEEP = (0, 0, 0, 0)
"""A source's sweep record before its first step: per pool group (full, swa) the K sweep counter last seen, then
per group the snapshot step it last moved at (the sweep age's start)."""
_SWEEP_GROUPS = tuple((2 + g, group, (_SWEEP_TAGS[group], _SWEEP_V[group])) for g, group in enumerate(_SWEEP_TAGS))
"""Per pool group: where its last sweep step is in the sweep record, its label, its sweep tags."""


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

    ``health`` (optional: a :class:`~kvcanary.monitor.health.HealthSink`) adds ``kvcanary_health_state`` and
    gives the watchdog gauge its state. One sink may hear several managers at once (a target and a draft pool)
    and one after another (a new cache): it keeps each manager's latest stats (by ``StepStats.source``;
    :mod:`kvcanary.monitor.sources`), a counter is the sum over them (so it never falls back), and a gauge
    is the worst among those still stepping.
    """

    def __init__(self, *, registry: CollectorRegistry | None = None, health: HealthSink | None = None) -> None:
        check_registry(registry, "MetricsSink")
        if health is not None and not isinstance(health, HealthSink):
            raise TypeError("kv-canary: MetricsSink: health must be a HealthSink or None, got "
                            f"{type(health).__name__} {health!r}")
        pc = require_prometheus()
        self._lock = threading.Lock()
        self._sources = SourceTable(self._retire, self._restore)
        self._base_tags: set[CanaryLaunchTag] = set()
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
        self._watchdog_failed = False
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
        table = self._sources
        last = table.known(stats)
        prior = last if last is not None else table.retired(stats)  # a retired manager goes on from its record
        sweep = _NO_SWEEP if prior is None else prior[2]
        counters = stats.kernel_run_counters
        if counters:  # sweep age: the snapshot step the device last counted a sweep launch at, per group
            full, swa = counters[_SWEEP_FULL], counters[_SWEEP_SWA]
            if full != sweep[0] or swa != sweep[1]:
                snap = stats.snapshot_step or 0
                sweep = (full, swa, snap if full != sweep[0] else sweep[2], snap if swa != sweep[1] else sweep[3])
        if stats.watchdog_error is not None:
            self._watchdog_failed = True  # sticky, as health's; set before the stats that carry it
        if last is not None:
            table.set(stats, sweep)  # the stats with their sweep record in one assignment: a scrape sees both
        else:
            with self._lock:  # a new manager: what it retires moves into the base as a scrape reads them
                table.admit(stats, sweep)

    def _retire(self, last: StepStats) -> None:
        """A source left the table (replaced, or the least recently heard of too many): fold its cumulative
        device counters into the base (the caller holds the lock)."""
        self._fold(last, 1)
        self._base_tags.update(last.tags)

    def _restore(self, last: StepStats) -> None:
        """A source retired as the least recently heard steps again: take the figures :meth:`_retire` folded
        back out of the base, its new stats carry them (the caller holds the lock; its tags stay)."""
        self._fold(last, -1)

    def _fold(self, last: StepStats, sign: int) -> None:
        """Add ``sign`` times the cumulative figures of ``last`` to the base."""
        for i, c in enumerate(last.kernel_run_counters):
            self._base_launches[i] += sign * c
        for i, c in enumerate(last.slot_run_counters):
            self._base_slots[i] += sign * c
        self._base_dropped += sign * last.dropped_rows
        self._base_skipped += sign * last.skipped_verifies
        self._base_steps += sign * (last.step + 1)

    # -- the collector ------------------------------------------------------------------------------------
    def describe(self) -> list[Metric]:
        return list(self._families(describing=True))

    def collect(self) -> Iterator[Metric]:
        return self._families(describing=False)

    def _families(self, *, describing: bool) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:  # every source's stats with the base they go with (a retired source moves under it)
            table = self._sources
            kept = [] if describing else [(e[0], e[2], table.live(e)) for e in table.entries()]
            launches = list(self._base_launches)
            slots = list(self._base_slots)
            tag_set = set() if describing else set(self._base_tags)
            dropped, skipped, steps = self._base_dropped, self._base_skipped, self._base_steps
            violations = dict(self._violations)
            failed = dict(self._failed)
            quarantined, finished, decisions = self._quarantined, self._finished, self._decisions
            watchdog_failed = self._watchdog_failed  # read after the stats: it is set before them
        health = self.health.status() if self.health is not None and not describing else None  # once a scrape
        for stats, _sweep, _live in kept:
            for i, c in enumerate(stats.kernel_run_counters):
                launches[i] += c
            for i, c in enumerate(stats.slot_run_counters):
                slots[i] += c
            dropped += stats.dropped_rows
            skipped += stats.skipped_verifies
            steps += stats.step + 1
            tag_set.update(stats.tags)
        tags = sorted(tag_set)
        live = [(stats, sweep) for stats, sweep, is_live in kept if is_live]

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
        for g, group, sweep_tags in _SWEEP_GROUPS:  # the stalest sweep among the live managers that sweep it
            ages = [max(0, (stats.snapshot_step or 0) - sweep[g]) for stats, sweep in live
                    if sweep_tags[0] in stats.tags or sweep_tags[1] in stats.tags]
            if ages:
                age.add_metric([group], max(ages))
        yield age
        wd = GaugeMetricFamily(f"{PREFIX}_watchdog_state", "The kernel-run-counter watchdog's state (1 for the "
                               "current one): warmup, ok, failed", labels=["state"])
        if health is not None:
            current = health.watchdog
        else:
            current = "failed" if watchdog_failed else worst_watchdog(stats.watchdog for stats, _ in live)
        for s in WATCHDOG_STATES:
            wd.add_metric([s], 1.0 if s == current else 0.0)
        yield wd
        rb = GaugeMetricFamily(f"{PREFIX}_readback_delay_steps", "Steps between the step that ended last and the "
                               "device state the host last read (the read-back is one step behind)")
        delays = [d for stats, _ in live if (d := stats.readback_delay) is not None]
        if delays:
            rb.add_metric([], max(delays))
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
            state = health.state.value if health is not None else "ok"
            for s in ("ok", "degraded", "failed"):
                hf.add_metric([s], 1.0 if s == state else 0.0)
            yield hf

"""What the monitor sinks report against what the guard did and the device counted (review rA, wave 3).

Each test pins a report that once disagreed with the decision or the device counters behind it: sliding-window
quarantines, a manager that follows a one-step manager, a scrape or a status racing a new manager."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from kvcanary.guard.decision import GuardDecision
from kvcanary.manager import CanaryConfig
from kvcanary.monitor import HealthState, Monitor
from tests.manager.world import Req, World, make_world
from tests.monitor.test_monitor import monitored, scrape, value


def test_the_isolation_event_names_the_sliding_window_blocks_it_quarantined(
        caplog: pytest.LogCaptureFixture) -> None:
    """A decision that quarantines only blocks of the sliding-window pool is logged (it is not empty) and
    names them: ``quarantined_blocks_swa`` beside ``quarantined_blocks`` (added under ``kvcanary.event/1``;
    it used to name no block at all)."""
    mon = Monitor(metrics=False)
    with caplog.at_level(logging.INFO, logger="kvcanary.events"):
        mon.on_decision(GuardDecision(step=4, events=(), quarantine_swa=(3, 9)))
    events = [r.kvcanary_event for r in caplog.records if r.name == "kvcanary.events"]  # type: ignore[attr-defined]
    assert len(events) == 1  # the decision is logged ...
    named = [v for k, v in events[0].items() if "quarantine" in k]
    assert any(sorted(v) == [3, 9] for v in named), events[0]  # ... and says which blocks left service
    assert events[0]["quarantined_blocks"] == [] and events[0]["quarantined_blocks_swa"] == [3, 9]


def test_sliding_window_quarantines_are_counted() -> None:
    """``kvcanary_blocks_quarantined_total`` and health's ``blocks_quarantined`` count every block taken out
    of service, of the full-attention pool and of the sliding-window pool (docs/monitoring.md says why one
    counter, not a ``pool`` label); they used to leave out ``decision.quarantine_swa``."""
    reg = CollectorRegistry()
    mon = Monitor(registry=reg, events=False)
    mon.on_decision(GuardDecision(step=4, events=(), quarantine=(1,), quarantine_swa=(3, 9)))
    assert mon.status().blocks_quarantined == 3
    assert value(scrape(reg), "kvcanary_blocks_quarantined_total") == 3


def test_an_empty_decision_is_not_counted_as_handed_to_the_engine() -> None:
    """The manager tells the sinks every decision, also an empty one (rows on a block already quarantined
    whose holders were failed, or on the padding slot with no holder), and hands only non-empty ones to the
    adapter; ``kvcanary_isolation_decisions_total`` counts "isolation decisions handed to the engine"."""
    reg = CollectorRegistry()
    mon = Monitor(registry=reg, events=False)
    mon.on_decision(GuardDecision(step=5, events=()))
    assert value(scrape(reg), "kvcanary_isolation_decisions_total") == 0
    mon.on_decision(GuardDecision(step=6, events=(), quarantine=(2,)))
    assert value(scrape(reg), "kvcanary_isolation_decisions_total") == 1


def test_a_new_manager_after_a_one_step_manager_continues_the_counters() -> None:
    """An old manager that ended one step (step 0; flushed when its cache is let go, as the transformers
    integration does) and a new one whose first step is step 0 have the same step count: ``MetricsSink`` tells
    them apart by ``StepStats.source`` and the old launches stay in ``kvcanary_launches_total`` (it used to
    retire a manager only when the step went back, and lost them)."""
    w, mon, reg, _a = monitored()  # one forward, one step: step 0
    w.manager.flush()
    before = value(scrape(reg), "kvcanary_launches_total", launch_tag="HEAD_K_FULL")
    assert before > 0
    w2 = make_world()
    w2.manager.add_sink(mon)
    w2.forward([(Req(1, list(range(100, 112)), list(range(1, 5))), 0, 4)])
    w2.step()
    w2.manager.flush()
    assert value(scrape(reg), "kvcanary_launches_total", launch_tag="HEAD_K_FULL") == before + 2
    assert value(scrape(reg), "kvcanary_steps_total") == 2  # one step each


def test_a_scrape_racing_a_new_managers_first_step_never_goes_backwards() -> None:
    """``collect()`` used to read ``self._stats`` when called and the base totals later, under the lock, when
    prometheus-client iterated it, while ``on_step`` folded the old stats into the base under the lock and
    swapped ``self._stats`` after it. A scrape (an HTTP thread) between the two saw the old manager in the
    base and in the stats: a counter that then fell back on the next scrape (a reset to Prometheus'
    ``rate``). The interleaving is forced here by creating the collect generator before the step and
    reading it after. Now the stats and the base are read, and swapped, in one critical section."""
    w, mon, reg, _a = monitored()
    w.step()
    assert mon.metrics is not None
    first = value(scrape(reg), "kvcanary_launches_total", launch_tag="HEAD_K_FULL")
    racing = mon.metrics.collect()  # the scrape has begun: it holds the old manager's stats
    w2 = make_world()
    w2.manager.add_sink(mon)
    w2.step()  # a new manager's first step: the old totals move into the base
    raced = {s.labels.get("launch_tag"): s.value for fam in racing for s in fam.samples
             if s.name == "kvcanary_launches_total"}
    later = value(scrape(reg), "kvcanary_launches_total", launch_tag="HEAD_K_FULL")
    assert raced["HEAD_K_FULL"] <= later, (first, raced["HEAD_K_FULL"], later)


def overflowed() -> tuple[World, Monitor, int]:
    """A one-step manager whose ring (capacity 2) overflowed, flushed as a let-go cache is, with a health-only
    monitor; and the rows it dropped."""
    cfg = CanaryConfig(ring_capacity=2, real_kv_mode=make_world().manager.config.real_kv_mode,
                       health_warmup_steps=100)
    w = make_world(config=cfg)
    mon = Monitor(metrics=False, events=False)
    w.manager.add_sink(mon)
    a = Req(1, list(range(100, 112)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    for s in range(2, 8):
        w.k[s, 0, 0] += 1.0
    w.forward([(a, 10, 0)])
    w.step()
    w.manager.flush()  # the old cache is let go: its last rows are read back
    status = mon.status()
    assert status.state is HealthState.FAILED and status.dropped_rows > 0 and status.step == 0
    return w, mon, status.dropped_rows


def test_a_ring_overflow_stays_failed_after_a_new_manager_follows_a_one_step_manager() -> None:
    """``HealthSink`` keeps the old manager's dropped rows when a new manager's stats come (another
    ``StepStats.source``), also when the old one ended only step 0 and the new one's step 0 is not below it:
    the "sticky" failed state stays failed (it used to turn back into degraded, 200)."""
    _w, mon, dropped = overflowed()
    w2 = make_world()
    w2.manager.add_sink(mon)
    w2.step()
    assert mon.status().state is HealthState.FAILED, mon.status()
    assert mon.status().dropped_rows == dropped


class _StepOnEnter:
    """A lock that runs ``before`` (once) when first entered, then locks: a step of another thread landing
    between a reader's first look at the sink and its critical section."""

    def __init__(self, lock: threading.Lock, before: Callable[[], None]) -> None:
        self.lock = lock
        self.before: Callable[[], None] | None = before

    def __enter__(self) -> bool:
        before, self.before = self.before, None
        if before is not None:
            before()
        return self.lock.__enter__()

    def __exit__(self, *exc: object) -> None:
        self.lock.__exit__(None, None, None)


def test_a_status_racing_a_new_managers_first_step_counts_the_old_dropped_rows_once() -> None:
    """``status()`` used to read the last stats before taking its lock, and ``on_step`` to fold the old
    manager's dropped rows into its own under the lock: a status between the two counted them twice (the old
    stats' and the folded ones). The step is forced into that gap by a lock that runs it when first entered;
    the status now reads the stats and the folded rows in one critical section."""
    _w, mon, dropped = overflowed()
    w2 = make_world()
    w2.manager.add_sink(mon)
    health = mon.health
    health._lock = _StepOnEnter(health._lock, w2.step)  # type: ignore[assignment]
    racing = mon.status()
    assert w2.manager.step == 1  # the step ran inside the status
    assert racing.dropped_rows == dropped == mon.status().dropped_rows, (racing, dropped)

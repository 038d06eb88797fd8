"""The per-manager table behind the health and metrics sinks: bounded, each source's latest stats, a source that
began again retired, and gauges taken only from the sources still stepping."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from kvcanary.consts import NUM_LAUNCH_TAGS, CanaryLaunchTag
from kvcanary.manager.stats import StepStats
from kvcanary.monitor import CanaryHealth, HealthSink, HealthState, MetricsSink
from kvcanary.monitor.sources import LIVE_STEPS, MAX_SOURCES, Heard, SourceTable, latest, worst_watchdog
from tests.monitor.test_monitor import scrape, value

TAGS = (CanaryLaunchTag.HEAD_K_FULL, CanaryLaunchTag.SWEEP_K_FULL)


def stats(source: int, step: int, *, head: int = 0, sweeps: int = 0, watchdog: str = "ok",
          error: str | None = None, violations: int = 0, ring: int = 0) -> StepStats:
    """Stats of manager ``source`` at ``step``: ``head`` HEAD launches and ``sweeps`` sweep launches so far."""
    counters = [0] * NUM_LAUNCH_TAGS
    counters[CanaryLaunchTag.HEAD_K_FULL] = head
    counters[CanaryLaunchTag.SWEEP_K_FULL] = sweeps
    return StepStats(step, 0, sweeps, violations, 2, 2, 0, snapshot_step=step - 1, ring_capacity=ring,
                     kernel_run_counters=tuple(counters), slot_run_counters=tuple(counters), tags=TAGS,
                     watchdog=watchdog, watchdog_error=error, source=source)


def hear(table: SourceTable, s: StepStats) -> Heard:
    """What a sink does per step: go on from the source's entry, or admit it."""
    if not table.put(s, ()):
        table.admit(s, ())
    entry = table.known(s)
    assert entry is not None and entry[0] is s and entry[1] == table.heard
    return entry


def test_the_table_keeps_each_sources_latest_and_retires_the_least_recently_heard() -> None:
    retired: list[StepStats] = []
    restored: list[StepStats] = []
    table = SourceTable(retired.append, restored.append)
    for src in range(1, MAX_SOURCES + 1):
        hear(table, stats(src, 0))
    hear(table, stats(1, 1))  # source 1 heard again: source 2 is now the least recently heard
    assert retired == [] and len(table.entries()) == MAX_SOURCES
    last = hear(table, stats(MAX_SOURCES + 1, 0))
    assert [s.source for s in retired] == [2] and len(table.entries()) == MAX_SOURCES and restored == []
    assert {e[0].source for e in table.entries()} == {1, *range(3, MAX_SOURCES + 2)}
    assert {e[0].step for e in table.entries() if e[0].source == 1} == {1}
    assert latest(table.entries()) is last[0] and latest([]) is None


def test_a_source_whose_step_went_back_is_retired_and_begins_again() -> None:
    """Figures made outside a manager all carry source 0: a step that goes back is a new run."""
    retired: list[StepStats] = []
    restored: list[StepStats] = []
    table = SourceTable(retired.append, restored.append)
    hear(table, stats(0, 5))
    assert table.known(stats(0, 5)) is not None and table.known(stats(1, 5)) is None
    hear(table, stats(0, 6))
    assert retired == [] and table.known(stats(0, 4)) is None
    hear(table, stats(0, 2))
    assert [s.step for s in retired] == [6] and [e[0].step for e in table.entries()] == [2]
    assert restored == []  # begun again: the old run's figures stay in the base


def test_a_source_is_live_for_live_steps_after_it_was_last_heard() -> None:
    table = SourceTable(lambda s: None, lambda s: None)
    old = hear(table, stats(1, 0))
    for n in range(LIVE_STEPS - 1):
        hear(table, stats(2, n))
    assert table.live(old)
    hear(table, stats(2, LIVE_STEPS))
    assert not table.live(old) and all(table.live(e) for e in table.entries() if e is not old)


def test_the_worst_watchdog_wins() -> None:
    assert worst_watchdog([]) == "warmup"
    assert worst_watchdog(["ok", "ok"]) == "ok"
    assert worst_watchdog(["ok", "warmup"]) == "warmup"
    assert worst_watchdog(["warmup", "failed", "ok"]) == "failed"


def test_counters_stay_whole_past_the_bound_of_the_table() -> None:
    """A manager per run, more than the table keeps: the runs it retired stay in every counter."""
    reg = CollectorRegistry()
    sink = MetricsSink(registry=reg)
    runs = MAX_SOURCES + 4
    for src in range(1, runs + 1):
        sink.on_step(stats(src, 0, head=2))
        sink.on_step(stats(src, 1, head=4))
    s = scrape(reg)
    assert value(s, "kvcanary_launches_total", launch_tag="HEAD_K_FULL") == 4 * runs
    assert value(s, "kvcanary_steps_total") == 2 * runs
    sink.unregister()


def test_gauges_are_the_worst_among_the_live_managers_only() -> None:
    """A manager still in warmup keeps the watchdog at warmup, and the stalest sweep sets the sweep age; once a
    replaced manager has not been heard for LIVE_STEPS steps, its gauges no longer count (its counters do)."""
    reg = CollectorRegistry()
    health = HealthSink()
    sink = MetricsSink(registry=reg, health=health)
    for s in (health, sink):
        s.on_step(stats(1, 10, head=10, sweeps=1))  # manager 1 swept at snapshot 9
        s.on_step(stats(2, 3, head=3, sweeps=0, watchdog="warmup"))  # manager 2: no sweep by snapshot 2
        s.on_step(stats(1, 20, head=20, sweeps=1))  # no sweep since: age 19 - 9
    got = scrape(reg)
    assert value(got, "kvcanary_watchdog_state", state="warmup") == 1 and health.status().watchdog == "warmup"
    assert value(got, "kvcanary_sweep_age_steps", group="full") == 10  # the stalest: 10 beside 2
    for s in (health, sink):
        s.on_step(stats(2, 40, head=40, sweeps=0, watchdog="ok"))  # manager 2: still no sweep, age 39
    assert value(scrape(reg), "kvcanary_sweep_age_steps", group="full") == 39
    for n in range(LIVE_STEPS):  # manager 2 is gone; manager 1 steps on, sweeping every step
        for s in (health, sink):
            s.on_step(stats(1, 21 + n, head=21 + n, sweeps=2 + n))
    got = scrape(reg)
    assert value(got, "kvcanary_watchdog_state", state="ok") == 1 and health.status().watchdog == "ok"
    assert value(got, "kvcanary_sweep_age_steps", group="full") == 0  # manager 2's 39 no longer counts
    assert value(got, "kvcanary_launches_total", launch_tag="HEAD_K_FULL") == 20 + LIVE_STEPS + 40
    assert health.status().step == 20 + LIVE_STEPS
    sink.unregister()


def test_a_watchdog_failure_stays_failed_after_its_manager_is_retired() -> None:
    reg = CollectorRegistry()
    health = HealthSink()
    sinks = (health, MetricsSink(registry=reg), MetricsSink(registry=CollectorRegistry(), health=health))
    for s in sinks:
        s.on_step(stats(1, 5, watchdog="failed", error="HEAD_K_FULL stopped"))
        for src in range(2, MAX_SOURCES + 3):
            s.on_step(stats(src, 0))
    assert health.status().state is HealthState.FAILED and health.status().watchdog == "failed"
    assert value(scrape(reg), "kvcanary_watchdog_state", state="failed") == 1


def test_a_scrape_asks_the_health_for_its_status_once() -> None:
    """The watchdog and the health gauges come from one status, so they cannot disagree within a scrape."""

    class Counting(HealthSink):
        calls = 0

        def status(self) -> CanaryHealth:
            Counting.calls += 1
            return super().status()

    reg = CollectorRegistry()
    health = Counting()
    MetricsSink(registry=reg, health=health)
    health.on_step(stats(1, 3))
    Counting.calls = 0
    scrape(reg)
    assert Counting.calls == 1

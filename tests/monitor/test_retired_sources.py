"""A manager the sinks retired (folded into their base as one of more than ``MAX_SOURCES``) and then heard
again is a live manager, not a new one: its cumulative figures are already in the base, so admitting them
again counts them twice (rE). Each counter must equal the sum of every manager's latest figures."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from kvcanary.manager.stats import StepStats
from kvcanary.monitor import HealthSink, MetricsSink
from kvcanary.monitor.sources import MAX_RETIRED, MAX_SOURCES, SourceTable
from tests.monitor.test_monitor import scrape, value
from tests.monitor.test_sources import hear, stats


def test_more_live_managers_than_the_table_keeps_are_counted_once() -> None:
    """MAX_SOURCES + 1 managers stepping in turn: each step retires the least recently heard, which steps next."""
    reg = CollectorRegistry()
    metrics, health = MetricsSink(registry=reg), HealthSink()
    managers, steps = MAX_SOURCES + 1, 3
    for step in range(steps):
        for src in range(1, managers + 1):
            s = stats(src, step, head=step + 1, violations=5 * (step + 1), ring=2)
            metrics.on_step(s)
            health.on_step(s)
    got = scrape(reg)
    assert value(got, "kvcanary_steps_total") == managers * steps
    assert value(got, "kvcanary_launches_total", launch_tag="HEAD_K_FULL") == managers * steps
    assert health.status().dropped_rows == managers * (5 * steps - 2)
    metrics.unregister()


def test_an_idle_manager_retired_by_newer_ones_is_counted_once_when_it_steps_again() -> None:
    """A long-lived manager idles while MAX_SOURCES short runs come and go (a server making a manager per
    run beside its main one); when it steps again, its totals go on from where they were."""
    reg = CollectorRegistry()
    metrics, health = MetricsSink(registry=reg), HealthSink()
    main = 1
    for s in (metrics, health):
        s.on_step(stats(main, 9, head=10, violations=7, ring=4))
    for run in range(2, MAX_SOURCES + 2):  # the short runs retire the idle main manager
        for s in (metrics, health):
            s.on_step(stats(run, 0, head=1))
    for s in (metrics, health):
        s.on_step(stats(main, 10, head=11, violations=7, ring=4))
    got = scrape(reg)
    assert value(got, "kvcanary_steps_total") == 11 + MAX_SOURCES
    assert value(got, "kvcanary_launches_total", launch_tag="HEAD_K_FULL") == 11 + MAX_SOURCES
    assert health.status().dropped_rows == 3
    metrics.unregister()


def test_the_table_restores_a_retired_source_that_steps_on_and_not_one_that_began_again() -> None:
    """Retired as the least recently heard, a source that steps again hands its folded stats back (once); one
    whose step went back (figures made outside a manager, source 0, begun again) leaves them in the base."""
    retired: list[StepStats] = []
    restored: list[StepStats] = []
    table = SourceTable(retired.append, restored.append)
    first = {src: stats(src, 4) for src in range(0, MAX_SOURCES + 2)}
    for s in first.values():
        hear(table, s)
    assert retired == [first[0], first[1]] and restored == []
    assert table.retired(stats(1, 4)) is not None and table.retired(stats(1, 3)) is None
    assert table.retired(stats(2, 9)) is None  # kept, not retired
    hear(table, stats(1, 5))  # source 1 steps on: restored; retiring source 2 makes room
    assert restored == [first[1]] and retired[-1] is first[2]
    assert table.retired(stats(1, 6)) is None  # back in the table: nothing left to restore
    hear(table, stats(0, 2))  # source 0 began again: its old run's figures stay folded
    assert restored == [first[1]] and retired[-1] is first[3]
    assert table.retired(stats(0, 9)) is None  # and they are forgotten, not restored later
    assert {e[0].source for e in table.entries()} == {0, 1, *range(4, MAX_SOURCES + 2)}


def test_the_table_remembers_at_most_max_retired_sources() -> None:
    """Past MAX_RETIRED retired sources the earliest is forgotten: the memory a server with a manager per run
    keeps stays bounded (that one, were it to step again, would count its old figures twice)."""
    table = SourceTable(lambda s: None, lambda s: None)
    total = MAX_SOURCES + MAX_RETIRED + 1
    for src in range(1, total + 1):
        hear(table, stats(src, 0))
    assert table.retired(stats(1, 0)) is None  # the earliest retired: forgotten
    assert all(table.retired(stats(src, 0)) is not None for src in range(2, MAX_RETIRED + 2))
    assert all(table.retired(stats(src, 0)) is None for src in range(MAX_RETIRED + 2, total + 1))  # kept


def test_a_retired_manager_keeps_its_sweep_age_when_it_steps_again() -> None:
    """The sweep age goes on from the record the manager had when it was retired, not from a fresh one (which
    would take its old sweep count for a new sweep and report age 0)."""
    reg = CollectorRegistry()
    metrics = MetricsSink(registry=reg)
    metrics.on_step(stats(1, 10, head=10, sweeps=1))  # swept at snapshot 9
    for run in range(2, MAX_SOURCES + 2):  # the short runs retire manager 1; none of them sweeps
        metrics.on_step(stats(run, 0, head=1))
    metrics.on_step(stats(1, 20, head=20, sweeps=1))  # steps again, no sweep since snapshot 9
    got = scrape(reg)
    assert value(got, "kvcanary_sweep_age_steps", group="full") == 19 - 9
    assert value(got, "kvcanary_launches_total", launch_tag="HEAD_K_FULL") == 20 + MAX_SOURCES
    metrics.unregister()

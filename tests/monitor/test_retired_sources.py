"""A manager the sinks retired (folded into their base as one of more than ``MAX_SOURCES``) and then heard
again is a live manager, not a new one: its cumulative figures are already in the base, so admitting them
again counts them twice (rE). Each counter must equal the sum of every manager's latest figures."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from kvcanary.monitor import HealthSink, MetricsSink
from kvcanary.monitor.sources import MAX_SOURCES
from tests.monitor.test_monitor import scrape, value
from tests.monitor.test_sources import stats


@pytest.mark.xfail(strict=True, reason="rE: a retired source heard again is admitted on top of its folded figures")
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


@pytest.mark.xfail(strict=True, reason="rE: a retired source heard again is admitted on top of its folded figures")
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

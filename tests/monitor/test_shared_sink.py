"""One Monitor on two live managers (a target pool and a draft pool, each with its own manager): the counters are
both managers' figures, not a refold of one into the other at every alternation (rD)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from kvcanary.monitor import Monitor
from tests.manager.world import Req, World, make_world
from tests.monitor.test_monitor import scrape, value


def _decode(w: World, a: Req, n: int) -> None:
    a.slots.append(20 + n)
    w.forward([(a, 10 + n, 1)])
    w.step()


@pytest.mark.xfail(strict=True, reason="rD: MetricsSink / HealthSink take stats from another source as 'a new "
                                       "manager replaced the old' and fold the old one's cumulative counters into "
                                       "the base every time the two alternate: steps 56 for 14, HEAD launches 84 "
                                       "for 24")
def test_one_monitor_on_two_managers_counts_each_managers_figures_once() -> None:
    reg = CollectorRegistry()
    mon = Monitor(registry=reg)
    worlds = [make_world(), make_world()]
    reqs = [Req(1, list(range(100, 140)), list(range(1, 11))) for _ in worlds]
    for w, a in zip(worlds, reqs, strict=True):
        w.manager.add_sink(mon)
        w.forward([(a, 0, 10)])
        w.step()
    for n in range(6):
        for w, a in zip(worlds, reqs, strict=True):
            _decode(w, a, n)
    s = scrape(reg)
    snaps = [w.manager.last_snapshot for w in worlds]
    assert all(snap is not None for snap in snaps)
    head = sum(snap.kernel_run_counters[0] for snap in snaps if snap is not None)
    assert value(s, "kvcanary_steps_total") == sum(w.manager.step for w in worlds)
    assert value(s, "kvcanary_launches_total", launch_tag="HEAD_K_FULL") == head

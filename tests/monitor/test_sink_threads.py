"""A sink is fed by the serving thread and read by the HTTP thread: a read that lands inside ``on_step`` sees the
step's figures with what they imply, or the previous step's, never a mix (rD).

Each test makes the HTTP thread's read land at one point inside ``on_step``: the stats hand over one field through
a property that starts the read on another thread the first time ``on_step`` asks for it. The read waits for
``on_step`` when the sink holds its lock there (what a fix may do), so it is joined after ``on_step`` returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from kvcanary.consts import NUM_LAUNCH_TAGS, CanaryLaunchTag
from kvcanary.manager.stats import StepStats
from kvcanary.monitor import HealthSink, HealthState, MetricsSink


def _stats_reading(field: str, read: Callable[[], Any], **figures: Any) -> tuple[StepStats, list[Any]]:
    """StepStats whose ``field``, the first time it is read, starts ``read()`` on another thread; the list gets
    its result."""
    got: list[Any] = []
    fired: list[threading.Thread] = []

    class Probe(StepStats):
        def __getattribute__(self, name: str) -> Any:
            if name == field and not fired:
                t = threading.Thread(target=lambda: got.append(read()))
                fired.append(t)
                t.start()
                t.join(0.5)  # done unless the sink holds its lock: then it reads once on_step lets go
            return super().__getattribute__(name)

    base = StepStats(**figures)
    probe = object.__new__(Probe)
    probe.__dict__.update(base.__dict__)
    probe.__dict__["_rd_threads"] = fired
    return probe, got


def _join(stats: StepStats) -> None:
    for t in stats.__dict__["_rd_threads"]:
        t.join(5)


def test_a_health_read_inside_on_step_never_says_ok_with_a_failed_watchdog() -> None:
    sink = HealthSink()
    sink.on_step(StepStats(3, 0, 0, 0, 0, 1, 0, snapshot_step=2, watchdog="ok"))
    failing, got = _stats_reading("watchdog_error", sink.status, step=4, protected_tokens=0, sweep_passes=0,
                                  violations=0, launch_tags_active=0, launch_tags_total=1, skipped_verifies=0,
                                  snapshot_step=3, watchdog="failed", watchdog_error="HEAD_K_FULL stopped")
    sink.on_step(failing)
    _join(failing)
    assert sink.status().state is HealthState.FAILED
    assert len(got) == 1
    seen = got[0]
    assert (seen.watchdog == "failed") == (seen.state is HealthState.FAILED), seen


def _counters(sweeps: int) -> tuple[int, ...]:
    out = [0] * NUM_LAUNCH_TAGS
    out[CanaryLaunchTag.HEAD_K_FULL] = 8
    out[CanaryLaunchTag.SWEEP_K_FULL] = sweeps
    return tuple(out)


def test_a_scrape_inside_on_step_reports_the_sweep_age_of_one_step() -> None:
    reg = CollectorRegistry()
    sink = MetricsSink(registry=reg)
    tags = (CanaryLaunchTag.HEAD_K_FULL, CanaryLaunchTag.SWEEP_K_FULL)

    def age() -> float:
        for fam in sink.collect():
            if fam.name == "kvcanary_sweep_age_steps":
                return float(fam.samples[0].value)
        raise AssertionError("no sweep age")

    sink.on_step(StepStats(4, 0, 1, 0, 2, 2, 0, snapshot_step=3, kernel_run_counters=_counters(1), tags=tags))
    assert age() == 0
    swept, got = _stats_reading("kernel_run_counters", age, step=8, protected_tokens=0, sweep_passes=2, violations=0,
                                launch_tags_active=2, launch_tags_total=2, skipped_verifies=0, snapshot_step=7,
                                kernel_run_counters=_counters(2), tags=tags)
    sink.on_step(swept)
    _join(swept)
    assert age() == 0  # a sweep ran in the snapshot of step 7
    assert got == [0]  # the scrape inside on_step: step 3's figures (age 0) or step 7's (age 0), never 7 - 3

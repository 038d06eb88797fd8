"""The quiet step's fast path in ``end_step``: a step whose read-back holds nothing new and with no sweep or
watchdog check due makes no snapshot, calls no reporter and decodes no row; and every step still ends exactly
as the per-step path of before did (same reports with the same step labels, stats, sink calls, watchdog
checks and failures, log lines), checked against that path kept here as the reference."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from kvcanary.consts import CanaryMode, RealKvHashMode
from kvcanary.guard.decision import GuardDecision
from kvcanary.manager import CanaryCapacities, CanaryConfig, CanaryManager, StepStats, ViolationEvent
from kvcanary.manager.endpoints import Phase
from kvcanary.manager.health import HealthChecker
from kvcanary.manager.manager import logger as manager_logger
from kvcanary.manager.pump import HostSnapshot, SnapshotPump
from kvcanary.manager.reporter import ViolationReporter
from kvcanary.manager.sweep import SweepRunner
from tests.manager.world import Req, World, chain_entries, make_world


class _EveryStep(CanaryManager):
    """The reference: ``end_step`` as it was before the fast path, a snapshot, a report and a watchdog look at
    every step, the stats made from the snapshot."""

    def end_step(self, *, stats: bool = True) -> Any:  # what the reference is asked: end_step()
        assert stats
        return self._end()

    def _end(self) -> StepStats:
        s = self.step
        if self._sweep.due(s) and self._sweep_source is not None:
            self.run_sweep()
        self.health.mark(s)
        snap = self._pump.step(s)
        seen = len(self.reporter.events)
        try:
            if snap is not None:
                self.reporter.process(snap, s)
                if self.health.due(s):
                    self.health.check(snap, s)
        finally:
            self.step = s + 1
            if len(self.reporter.events) > seen:
                self._guard(self.reporter.events[seen:], s)
            stats = StepStats.from_snapshot(self._pump.snapshot(), step=s, sweep_passes=self._sweep.passes,
                                            tags=self._tags, ring_capacity=self.config.ring_capacity,
                                            watchdog=self.health.state, watchdog_error=self.health.failure)
            if self.sinks:
                self._tell("on_step", stats)
        if self.step % self.config.stats_every == 0:
            manager_logger.info(stats.line())
        return stats


@dataclass
class _Sink:
    steps: list[StepStats] = field(default_factory=list)
    violations: list[list[tuple[str, int, int, int]]] = field(default_factory=list)
    decisions: list[GuardDecision] = field(default_factory=list)

    def on_violations(self, events: Sequence[ViolationEvent]) -> None:
        self.violations.append([(e.message, e.ring_index, e.step_recorded, e.step_pumped) for e in events])

    def on_decision(self, decision: GuardDecision) -> None:
        self.decisions.append(decision)

    def on_step(self, stats: StepStats) -> None:
        self.steps.append(stats)


def _config(mode: CanaryMode) -> CanaryConfig:
    return CanaryConfig(mode=mode, real_kv_mode=RealKvHashMode.ALL, enable_v=True, sweep_interval=3,
                        health_warmup_steps=3, health_every=4, stats_every=5)


def _scenario(w: World, record: Callable[[str, Any], None], *, stats: bool = True) -> None:
    """Clean steps, a K corruption read by the forwards, a sweep-only corruption, a flush in between, a ring
    that grows over several steps, then a watchdog stall (launches counted on the host that never ran)."""
    a = Req(1, list(range(100, 124)), list(range(1, 9)))
    b = Req(2, list(range(200, 224)), list(range(20, 28)))
    w.manager.set_sweep_source(lambda: chain_entries([a, b]))

    def step(label: str) -> None:
        try:
            record(label, w.manager.end_step() if stats else w.manager.end_step(stats=False))
        except RuntimeError as err:
            record(label + " raised", str(err))
        record(label + " snapshot", w.manager.last_snapshot)

    w.forward([(a, 0, 8), (b, 0, 8)])
    step("prefill")
    for i in range(5):
        w.forward([(a, 8, 0), (b, 8, 0)])
        step(f"clean {i}")
    w.k[3] += 1.0  # read by a's verifies at every forward from here on
    for i in range(4):
        w.forward([(a, 8, 0)])
        step(f"k corrupt {i}")
    record("flush", [(e.message, e.step_pumped) for e in w.manager.flush()])
    w.v[22] += 1.0  # b no longer runs: only the sweep reads it
    for i in range(7):
        w.forward([(a, 8, 0)])
        step(f"sweep corrupt {i}")
    for i in range(10):  # the watchdog: TAIL launches the host counted but the device never ran
        w.manager.health.count(w.manager._phase_ids[Phase.TAIL])
        step(f"stall {i}")


def _run(cls: type[CanaryManager], mode: CanaryMode, caplog: pytest.LogCaptureFixture, *,
         stats: bool = True) -> list[tuple[str, Any]]:
    w = make_world(config=_config(mode))
    w.manager.__class__ = cls
    sink = _Sink()
    w.manager.add_sink(sink)
    out: list[tuple[str, Any]] = []
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kvcanary.manager"):
        _scenario(w, lambda label, value: out.append((label, value)), stats=stats)
    m = w.manager
    out += [("events", [(e.message, e.ring_index, e.step_recorded, e.step_pumped) for e in m.events]),
            ("sink steps", sink.steps), ("sink violations", sink.violations), ("decisions", sink.decisions),
            ("checks", (m.health.checks, m.health.failure, m.health.state)), ("sweeps", m.sweep_passes),
            ("log", [r.getMessage() for r in caplog.records])]
    return out


@pytest.mark.parametrize("mode", [CanaryMode.LOG, CanaryMode.RAISE])
def test_every_step_ends_as_the_per_step_path_did(mode: CanaryMode, caplog: pytest.LogCaptureFixture) -> None:
    fast, ref = _run(CanaryManager, mode, caplog), _run(_EveryStep, mode, caplog)
    assert [label for label, _ in fast] == [label for label, _ in ref]
    for (label, got), (_, want) in zip(fast, ref, strict=True):
        assert got == want, label
    found = dict(fast)
    assert found["events"] and {e[3] for e in found["events"]} != {found["events"][0][3]}  # several steps
    checks, failure, _ = found["checks"]
    assert checks >= 3 and failure is not None and "has not advanced" in failure
    assert any(label.startswith("stall") and label.endswith("raised") for label, _ in fast)
    assert any(m.startswith("[canary] step=") for m in found["log"])


@pytest.mark.parametrize("mode", [CanaryMode.LOG, CanaryMode.RAISE])
def test_a_step_whose_stats_are_not_read_ends_alike(mode: CanaryMode, caplog: pytest.LogCaptureFixture) -> None:
    """``end_step(stats=False)`` (the transformers integration's call) ends every step as ``end_step()`` does: the
    same reports, watchdog checks and failures, the sink hears the same stats, the same stats lines; it returns
    None."""
    unread, ref = _run(CanaryManager, mode, caplog, stats=False), _run(CanaryManager, mode, caplog)
    assert [label for label, _ in unread] == [label for label, _ in ref]
    returned = 0
    for (label, got), (_, want) in zip(unread, ref, strict=True):
        if isinstance(want, StepStats):
            returned += 1
            assert got is None, label
        else:
            assert got == want, label
    found = dict(unread)
    assert returned > 20 and len(found["sink steps"]) > 20 and any(m.startswith("[canary] step=") for m in found["log"])


def test_stats_nobody_reads_are_not_made(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Without a sink, ``end_step(stats=False)`` makes the stats only for the stats line (every ``stats_every``
    steps), and that line is the one ``end_step()`` logs."""
    lines = []
    for read in (True, False):
        w = make_world(config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL, sweep_interval=0, stats_every=4))
        a = Req(1, list(range(100, 124)), list(range(1, 9)))
        made = _count(monkeypatch, StepStats, "from_header")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="kvcanary.manager"):
            for s in range(13):
                w.forward([(a, 8 if s else 0, 0 if s else 8)])
                if read:
                    assert w.manager.end_step().step == s
                else:
                    assert w.manager.end_step(stats=False) is None
        lines.append([r.getMessage() for r in caplog.records])
        assert len(made) == (12 if read else 3)  # from step 1 on (a header read); unread: steps 3, 7 and 11
        monkeypatch.undo()
    assert lines[0] == lines[1] and len(lines[0]) == 3


def _count(monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> list[int]:
    calls: list[int] = []
    fn = getattr(owner, name)

    def counted(*a: Any, **k: Any) -> Any:
        calls.append(1)
        return fn(*a, **k)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_quiet_step_makes_no_snapshot_report_or_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    w = make_world(config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL, sweep_interval=0, health_warmup_steps=4,
                                       health_every=5))
    a = Req(1, list(range(100, 124)), list(range(1, 9)))
    w.forward([(a, 0, 8)])
    w.step()
    made = _count(monkeypatch, HostSnapshot, "__init__")
    reported = _count(monkeypatch, ViolationReporter, "process")
    decoded = _count(monkeypatch, SnapshotPump, "_decode")
    checked = _count(monkeypatch, HealthChecker, "check")
    due = _count(monkeypatch, HealthChecker, "due")
    sweeps = _count(monkeypatch, SweepRunner, "due")
    checks_at = []
    for s in range(1, 20):
        before = len(checked)
        w.forward([(a, 8, 0)])
        stats = w.manager.end_step()
        assert stats.step == s and stats.snapshot_step == s - 1 and stats.violations == 0
        if len(checked) > before:
            checks_at.append(s)
    assert checks_at == [4, 9, 14, 19]  # the watchdog's cadence: warmup 4, every 5
    assert len(made) == len(checks_at)  # a snapshot only for the checks
    assert reported == [] and decoded == [] and sweeps == []
    assert len(due) == 2 * len(checks_at)  # looked at only beside a check: its mark and the check itself
    assert w.manager.health.failure is None and w.manager.events == []
    snap = w.manager.last_snapshot  # still there when asked for, as of the last read
    assert snap is not None and snap.step == 18 and snap.rows == ()


def test_a_violation_after_quiet_steps_is_reported_the_step_after_it_is_recorded() -> None:
    w = make_world(config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL, health_warmup_steps=1000))
    a = Req(1, list(range(100, 124)), list(range(1, 9)))
    w.forward([(a, 0, 8)])
    w.step()
    for _ in range(6):
        w.forward([(a, 8, 0)])
        w.step()
    assert w.manager.events == []
    w.k[5] += 1.0
    w.forward([(a, 8, 0)])  # step 7 records it
    w.step()
    assert w.manager.events == []
    stats = w.manager.end_step()  # step 8 reads step 7's copy
    ev = w.manager.events
    assert ev and {(e.step_recorded, e.step_pumped) for e in ev} == {(7, 8)} and "step_when_pumped=8" in ev[0].message
    assert stats.violations == len(ev) and w.manager.last_snapshot is not None
    assert w.manager.last_snapshot.rows and len(w.manager.last_snapshot.rows) == len(ev)


@pytest.mark.parametrize(("warmup", "every"), [(0, 1), (3, 1), (3, 4), (100, 100), (7, 3)])
def test_next_due_is_the_first_due_step(warmup: int, every: int) -> None:
    h = HealthChecker([], warmup=warmup, every=every)
    for s in range(0, 250):
        nxt = h.next_due(s)
        assert h.due(nxt) and nxt >= s and not any(h.due(t) for t in range(s, nxt))


def test_the_sweeps_next_due_step_follows_its_rule() -> None:
    w = make_world(sweep=3)
    sweep = w.manager._sweep
    a = Req(1, list(range(100, 124)), list(range(1, 9)))
    w.forward([(a, 0, 8)])
    for step in [0, 1, 2, 3, 5, 6, 9, 10, 40]:
        assert all((s >= sweep.next_due) == sweep.due(s) for s in range(-3, 60))
        if sweep.due(step):
            sweep.run(chain_entries([a]), step)
    assert make_world(sweep=0).manager._sweep.next_due > 1 << 40


def _overflow_run(cls: type[CanaryManager], caplog: pytest.LogCaptureFixture) -> list[Any]:
    caps = CanaryCapacities(verify_capacity=4, write_req_capacity=8, write_token_capacity=32, sweep_capacity=8,
                            expected_token_capacity=64)
    w = make_world(capacities=caps)
    w.manager.__class__ = cls
    a = Req(1, list(range(100, 112)), list(range(1, 11)))
    out: list[Any] = []
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kvcanary.manager"):
        w.forward([(a, 0, 3)])
        out.append(w.manager.end_step())
        for s in range(8):  # over the verify capacity (10 prefix entries > 4) every other step
            w.forward([(a, 10 if s % 2 else 3, 0)])
            out += [w.manager.end_step(), w.manager.last_snapshot]
    return out + [r.getMessage() for r in caplog.records]


def test_overflow_warnings_come_at_the_same_steps(caplog: pytest.LogCaptureFixture) -> None:
    """A read-back whose only news is a grown overflow count is not a quiet step: the warning still comes."""
    fast, ref = _overflow_run(CanaryManager, caplog), _overflow_run(_EveryStep, caplog)
    assert fast == ref
    assert sum("verify skipped" in m for m in fast if isinstance(m, str)) >= 3

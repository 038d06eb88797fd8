"""Metrics, JSON events and health, fed by a real manager on the toy pool: what an operator would scrape."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvcanary.consts import CanaryMode, FailReason
from kvcanary.guard.codes import FAILURE_CODES
from kvcanary.guard.decision import FinishedRequest, GuardDecision, RequestFailure
from kvcanary.manager import CanaryConfig
from kvcanary.monitor import EVENT_SCHEMA, HealthState, JsonFormatter, Monitor
from kvcanary.violations import format_violation
from tests.manager.world import Req, World, chain_entries, make_world


def scrape(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the registry's exposition text, parsed by prometheus-client's own parser."""
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def monitored(**world: Any) -> tuple[World, Monitor, CollectorRegistry, Req]:
    w = make_world(**world)
    reg = CollectorRegistry()
    mon = Monitor(registry=reg)
    w.manager.add_sink(mon)
    a = Req(1, list(range(100, 112)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    w.step()
    return w, mon, reg, a


def test_clean_steps_count_launches_and_slots_and_stay_ok() -> None:
    w, mon, reg, a = monitored(sweep=2)
    w.manager.set_sweep_source(lambda: chain_entries([a]))
    for n in range(4):
        a.slots.append(20 + n)
        w.forward([(a, 10 + n, 1)])
        w.step()
    s = scrape(reg)
    snap = w.manager.last_snapshot
    assert snap is not None
    for t in w.manager.active_tags:
        assert value(s, "kvcanary_launches_total", launch_tag=t.name) == snap.kernel_run_counters[t]
        assert value(s, "kvcanary_slots_checked_total", launch_tag=t.name) == snap.slot_run_counters[t]
    assert value(s, "kvcanary_launches_total", launch_tag="HEAD_K_FULL") == 2 * 4  # verify + write, 4 forwards
    assert value(s, "kvcanary_steps_total") == 5
    assert value(s, "kvcanary_readback_delay_steps") == 1
    assert value(s, "kvcanary_violation_rows_dropped_total") == 0
    assert value(s, "kvcanary_health_state", state="ok") == 1
    assert value(s, "kvcanary_sweep_age_steps", group="full") <= 2
    assert not [k for k in s if k[0] == "kvcanary_violations_total"]
    assert mon.status().state is HealthState.OK and mon.status().ready


def test_a_flip_moves_the_violation_counter_logs_one_json_event_and_degrades(
        caplog: pytest.LogCaptureFixture) -> None:
    w, mon, reg, a = monitored()
    w.k[3, 0, 0] += 1.0
    with caplog.at_level(logging.WARNING):
        w.forward([(a, 10, 0)])
        w.step()
        w.step()
    s = scrape(reg)
    tail = value(s, "kvcanary_violations_total", launch_tag="TAIL_K_FULL", check="per_forward_tail_k_full",
                 fail_reason="verify_real_kv_hash")
    assert tail == len(w.manager.events) >= 1
    records = [r for r in caplog.records if r.name == "kvcanary.events"]
    assert len(records) == len(w.manager.events)
    event = json.loads(records[0].getMessage())
    assert event == records[0].kvcanary_event  # type: ignore[attr-defined]
    v = w.manager.events[0].violation
    assert event["schema"] == EVENT_SCHEMA and event["event"] == "violation"
    assert (event["slot"], event["position"], event["launch_tag"]) == (3, v.position, "TAIL_K_FULL")
    assert event["fail_reasons"] == ["VERIFY_REAL_KV_HASH_MISMATCH"]
    assert event["fail_reason_labels"] == ["verify_real_kv_hash"] and event["fail_reason_bits"] == 4
    assert event["stored"]["chain_hash"] == f"{v.stored_chain_hash:#018x}"
    assert event["expected"]["chain_hash"] == f"{v.expected_aux:#018x}"
    # the one-line report is unchanged beside it
    report = [r.getMessage() for r in caplog.records if r.name == "kvcanary.manager"]
    assert report[0] == format_violation(v, total_violations=w.manager.total_violations,
                                         ring_capacity=w.manager.config.ring_capacity,
                                         step_when_pumped=w.manager.events[0].step_pumped)
    line = JsonFormatter().format(records[0])
    parsed = json.loads(line)
    assert parsed["logger"] == "kvcanary.events" and parsed["level"] == "WARNING" and parsed["slot"] == 3
    status = mon.status()
    assert status.state is HealthState.DEGRADED and status.ready and status.http_status == 200
    assert status.violations == len(w.manager.events)
    assert json.loads(json.dumps(status.to_dict()))["state"] == "degraded"
    assert value(s, "kvcanary_health_state", state="degraded") == 1


def test_ring_overflow_counts_dropped_rows_and_fails_health() -> None:
    cfg = CanaryConfig(ring_capacity=2, real_kv_mode=make_world().manager.config.real_kv_mode,
                       health_warmup_steps=100)
    w, mon, reg, a = monitored(config=cfg)
    for s_ in range(2, 8):
        w.k[s_, 0, 0] += 1.0
    w.forward([(a, 10, 0)])
    w.step()
    w.step()
    total = w.manager.total_violations
    assert total > 2
    s = scrape(reg)
    assert value(s, "kvcanary_violation_rows_dropped_total") == total - 2
    assert sum(v for k, v in s.items() if k[0] == "kvcanary_violations_total") == 2
    st = mon.status()
    assert st.state is HealthState.FAILED and not st.ready and st.http_status == 503
    assert any("ring overflow" in r for r in st.reasons)


def test_the_watchdog_failing_shows_in_health_and_metrics() -> None:
    w = make_world(config=CanaryConfig(sweep_interval=0, health_warmup_steps=3, health_every=1))
    reg = CollectorRegistry()
    mon = Monitor(registry=reg)
    w.manager.add_sink(mon)
    for _ in range(3):
        w.step()
    assert value(scrape(reg), "kvcanary_watchdog_state", state="warmup") == 1
    with pytest.raises(RuntimeError, match="canary path is not executing"):
        w.step()
    s = scrape(reg)
    assert value(s, "kvcanary_watchdog_state", state="failed") == 1
    assert value(s, "kvcanary_watchdog_state", state="ok") == 0
    st = mon.status()
    assert st.state is HealthState.FAILED and st.watchdog == "failed"
    assert "kernel_run_counter is zero after warmup" in st.reasons[0]


def test_raise_mode_sinks_hear_the_rows_the_step_raises_for() -> None:
    cfg = CanaryConfig(mode=CanaryMode.RAISE, real_kv_mode=make_world().manager.config.real_kv_mode,
                       health_warmup_steps=100)
    w, mon, _reg, a = monitored(config=cfg)
    w.k[3, 0, 0] += 1.0
    w.forward([(a, 10, 0)])
    w.step()
    with pytest.raises(RuntimeError, match="kv_canary violation"):
        w.step()
    assert mon.status().violations == len(w.manager.events) >= 1


def test_decisions_move_the_isolation_counters_and_log_one_event(caplog: pytest.LogCaptureFixture) -> None:
    _w, mon, reg, _a = monitored()
    code = FAILURE_CODES["verify"]
    fail = RequestFailure(request_id="req-7", code=code, check="per_forward_tail_k_full", slot=3,
                          position=2, fail_reasons=(FailReason.VERIFY_REAL_KV_HASH_MISMATCH.name or "",),
                          step=4, message="kv-canary: request req-7 read corrupt KV", alias="KVCANARY-CORRUPT-READ")
    decision = GuardDecision(step=4, events=(), fail=(fail,), quarantine=(0, 5),
                             finished=(FinishedRequest("req-2", 3),))
    with caplog.at_level(logging.INFO):
        mon.on_decision(decision)
        mon.on_decision(GuardDecision(step=5, events=()))  # empty: no event
    s = scrape(reg)
    assert value(s, "kvcanary_requests_failed_total", code=code, alias="KVCANARY-CORRUPT-READ") == 1
    assert value(s, "kvcanary_blocks_quarantined_total") == 2
    assert value(s, "kvcanary_finished_requests_affected_total") == 1
    events = [r.kvcanary_event for r in caplog.records if r.name == "kvcanary.events"]  # type: ignore[attr-defined]
    assert len(events) == 1
    assert events[0]["event"] == "isolation" and events[0]["request_ids"] == ["req-7"]
    assert events[0]["failed"][0]["code"] == code == "KVC-G001" and events[0]["quarantined_blocks"] == [0, 5]
    assert events[0]["failed"][0]["alias"] == "KVCANARY-CORRUPT-READ"
    assert mon.status().requests_failed == 1


def test_a_new_manager_continues_the_counters_instead_of_resetting_them() -> None:
    w, mon, reg, _a = monitored()
    w.step()
    before = value(scrape(reg), "kvcanary_launches_total", launch_tag="HEAD_K_FULL")
    assert before > 0
    w2 = make_world()
    w2.manager.add_sink(mon)
    w2.forward([(Req(1, list(range(100, 112)), list(range(1, 5))), 0, 4)])
    w2.step()
    w2.step()
    assert value(scrape(reg), "kvcanary_launches_total", launch_tag="HEAD_K_FULL") == before + 2


def test_a_failing_sink_never_fails_the_step(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def on_violations(self, events: object) -> None: ...
        def on_decision(self, decision: object) -> None: ...
        def on_step(self, stats: object) -> None:
            raise ZeroDivisionError("boom")

    w = make_world()
    w.manager.add_sink(Broken())
    with caplog.at_level(logging.ERROR):
        w.step()
    assert w.manager.step == 1 and "sink Broken failed" in caplog.text
    with pytest.raises(TypeError, match="sink must implement on_violations"):
        w.manager.add_sink(object())  # type: ignore[arg-type]


def test_metrics_register_once_per_registry() -> None:
    reg = CollectorRegistry()
    Monitor(registry=reg)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Monitor(registry=reg)


def test_kvcanary_imports_without_prometheus_client_and_says_how_to_get_it() -> None:
    code = ("import sys; sys.modules['prometheus_client'] = None\n"
            "import kvcanary, kvcanary.monitor\n"
            "m = kvcanary.monitor.Monitor(metrics=False); print(m.status().state.value)\n"
            "try:\n    kvcanary.monitor.Monitor()\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.splitlines() == [
        "ok", "kv-canary: metrics need prometheus-client; install it with pip install 'kvcanary[metrics]'"]

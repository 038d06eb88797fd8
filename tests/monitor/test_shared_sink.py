"""One Monitor on two live managers (a target pool and a draft pool, each with its own manager): the counters are
both managers' figures, not a refold of one into the other at every alternation (rD)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from kvcanary.manager import CanaryConfig
from kvcanary.monitor import HealthState, Monitor
from tests.manager.world import Req, World, make_world
from tests.monitor.test_monitor import scrape, value


def _decode(w: World, a: Req, n: int) -> None:
    a.slots.append(20 + n)
    w.forward([(a, 10 + n, 1)])
    w.step()


def _two_managers(mon: Monitor) -> tuple[list[World], list[Req]]:
    worlds = [make_world(), make_world()]
    reqs = [Req(1, list(range(100, 140)), list(range(1, 11))) for _ in worlds]
    for w, a in zip(worlds, reqs, strict=True):
        w.manager.add_sink(mon)
        w.forward([(a, 0, 10)])
        w.step()
    return worlds, reqs


def test_one_monitor_on_two_managers_counts_each_managers_figures_once() -> None:
    reg = CollectorRegistry()
    mon = Monitor(registry=reg)
    worlds, reqs = _two_managers(mon)
    for n in range(6):
        for w, a in zip(worlds, reqs, strict=True):
            _decode(w, a, n)
    s = scrape(reg)
    snaps = [w.manager.last_snapshot for w in worlds]
    assert all(snap is not None for snap in snaps)
    head = sum(snap.kernel_run_counters[0] for snap in snaps if snap is not None)
    assert value(s, "kvcanary_steps_total") == sum(w.manager.step for w in worlds)
    assert value(s, "kvcanary_launches_total", launch_tag="HEAD_K_FULL") == head


def test_every_counter_of_two_live_managers_is_their_sum_and_never_goes_back() -> None:
    """Each tag's launches and slots are the two managers' device counters added, scrape after scrape."""
    reg = CollectorRegistry()
    mon = Monitor(registry=reg)
    worlds, reqs = _two_managers(mon)
    last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for n in range(5):
        for w, a in zip(worlds, reqs, strict=True):
            _decode(w, a, n)
            s = scrape(reg)
            for key, v in s.items():
                if key[0].endswith("_total"):
                    assert v >= last.get(key, 0), (key, last.get(key), v)
            last = s
    snaps = [w.manager.last_snapshot for w in worlds]
    for t in worlds[0].manager.active_tags:
        assert value(last, "kvcanary_launches_total", launch_tag=t.name) == sum(
            snap.kernel_run_counters[t] for snap in snaps if snap is not None)
        assert value(last, "kvcanary_slots_checked_total", launch_tag=t.name) == sum(
            snap.slot_run_counters[t] for snap in snaps if snap is not None)
    assert value(last, "kvcanary_readback_delay_steps") == 1
    assert value(last, "kvcanary_watchdog_state", state="ok") == 1
    assert mon.status().state is HealthState.OK and mon.status().watchdog == "ok"


def test_a_ring_overflow_on_one_of_two_live_managers_fails_health_with_its_rows() -> None:
    """Health counts each live manager: the draft's dropped rows fail it while the target steps clean."""
    cfg = CanaryConfig(ring_capacity=2, real_kv_mode=make_world().manager.config.real_kv_mode,
                       health_warmup_steps=100)
    mon = Monitor(metrics=False, events=False)
    target, draft = make_world(), make_world(config=cfg)
    reqs = [Req(1, list(range(100, 112)), list(range(1, 11))) for _ in range(2)]
    for w, a in zip((target, draft), reqs, strict=True):
        w.manager.add_sink(mon)
        w.forward([(a, 0, 10)])
    for s in range(2, 8):
        draft.k[s, 0, 0] += 1.0
    draft.forward([(reqs[1], 10, 0)])
    draft.step()
    draft.step()  # the rows are read back
    dropped = mon.status().dropped_rows
    assert dropped > 0 and mon.status().state is HealthState.FAILED
    for _ in range(3):  # the two step in turn: the rows count once, and the clean manager does not hide them
        target.step()
        assert mon.status().dropped_rows == dropped and mon.status().state is HealthState.FAILED
        draft.step()
        assert mon.status().dropped_rows == dropped

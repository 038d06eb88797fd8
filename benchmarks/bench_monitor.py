"""What the monitoring sinks (metrics, JSON events, health) cost per step when nothing fires.

Cases, on the manager tests' small pool (one FULL group, real-KV ALL, K and V, a decode step per iteration):

- ``end_step with a Monitor``: the manager's ``end_step`` with a :class:`kvcanary.monitor.Monitor` attached
  (health + JSON events + Prometheus metrics on a private registry). Floor: the same ``end_step`` with no sink,
  timed interleaved with it (benchmarks/timing.py ``wall_interleaved``), so the ratio is the sinks' share.
- ``Monitor.on_step``: the call the manager makes per step, alone. Floor: a sink whose ``on_step`` does
  nothing (the cost of any call at all).
- ``scrape``: rendering ``/metrics`` (prometheus-client's ``generate_latest`` of the registry), which runs
  when Prometheus asks, not per step. Floor: rendering an empty registry.

Each figure is printed beside its floor (benchmarks/report.py); host wall-clock time, one thread.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from prometheus_client import CollectorRegistry, generate_latest

from benchmarks import timing
from benchmarks.report import Report, machine
from kvcanary.manager import StepStats
from kvcanary.monitor import Monitor
from tests.manager.world import Req, World, make_world

BENCH = "bench_monitor"


class NoopSink:
    """A sink that does nothing: the floor of a per-step sink call."""

    def on_violations(self, events: object) -> None:
        pass

    def on_decision(self, decision: object) -> None:
        pass

    def on_step(self, stats: StepStats) -> None:
        pass


def decoding_world() -> tuple[World, Req]:
    w = make_world()
    a = Req(1, list(range(100, 100 + 32)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    w.step()
    return w, a


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--out", default=None, help="write the JSON records here")
    p.add_argument("--rounds", type=int, default=40, help="interleaved rounds (fastest kept)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    r = Report(BENCH, machine("cpu"))

    plain, _ = decoding_world()
    watched, _ = decoding_world()
    reg = CollectorRegistry()
    mon = Monitor(registry=reg)
    watched.manager.add_sink(mon)
    times = timing.wall_interleaved({"plain": plain.manager.end_step, "monitor": watched.manager.end_step},
                                    calls=50, rounds=args.rounds)
    r.add("end_step with a Monitor (health, events, metrics)", times["monitor"], times["plain"], unit="us",
          note="floor: end_step without sinks")
    assert watched.manager.total_violations == 0 and mon.status().state.value == "ok"

    stats = watched.manager.end_step()
    noop = NoopSink()
    calls = timing.wall_interleaved({"noop": lambda: noop.on_step(stats), "monitor": lambda: mon.on_step(stats)},
                                    calls=1000, rounds=args.rounds)
    r.add("Monitor.on_step", calls["monitor"], calls["noop"], unit="ns", note="floor: a sink whose on_step is empty")

    empty = CollectorRegistry()
    scrape = timing.wall_interleaved({"empty": lambda: generate_latest(empty),
                                      "kvcanary": lambda: generate_latest(reg)},
                                     calls=20, rounds=max(5, args.rounds // 4))
    r.add("scrape /metrics (per scrape, not per step)", scrape["kvcanary"], scrape["empty"], unit="us",
          note="floor: rendering an empty registry")
    r.write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

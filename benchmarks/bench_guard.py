"""What the isolate policy costs when nothing fires, beside its floor: the same work under the log policy.

Cases:

- ``manager_step``: one decode step of the canary (plan, HEAD and TAIL verify + write, ``end_step``) over a
  paged pool whose records are all live, under ``log`` and under ``isolate`` (with an adapter), each with
  the same do-nothing sink attached. The policy only acts on rows read back, so the floor is the log
  policy's step (the faster of the two log variants); the ratio is the overhead.
- ``engine_step``: kvcanary's demo engine, decode steps under ``log`` and under ``isolate``; the isolate
  engine also feeds the slot journal (the slots each request row reads, the radix tree's changes), which is
  host work the engine's adapter does. Floor: the log policy's step. At small sizes the feed is far below
  the A/A noise of a whole step, so the feed is also timed where it runs (inside the isolate engine's steps,
  ``the isolate guard's journal feed per step``) beside its floor (as many events copied into machine arrays),
  and its share of the step is printed beside the noise: what part of any step overhead the feed explains.

Variants are interleaved (benchmarks/timing.py ``interleaved_rounds``, the order rotated each round), so drift
in the machine and a variant's place in the round hit all alike. A third variant is the log policy again, built
and timed the same way (an A/A pair). The comparison is paired by round: each round's isolate figure over that
round's log-policy figure (the mean of the two log variants), the median of those ratios the overhead, and a
bootstrap over the rounds gives its 95 % interval. "not measurable": the interval reaches zero (the overhead
cannot be told from the noise); "measurable" otherwise. The A/A pair, compared the same way, is printed as its
own row and in each verdict (its median round-to-round gap: the run-to-run noise). Run from the repository root:
``python benchmarks/bench_guard.py [--device cuda] [--out benchmarks/results/bench_guard.json]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks import journal_cost, timing
from benchmarks.bench_engine import CanaryWorld, prefilled_engine
from benchmarks.report import Report, machine
from kvcanary.consts import RealKvHashMode
from kvcanary.guard import GuardDecision, ViolationPolicy
from kvcanary.manager import CanaryConfig, StepStats, ViolationEvent

BENCH = "bench_guard"


class _Quiet:
    """An adapter and a sink that do nothing (nothing fires in these runs)."""

    def apply(self, decision: GuardDecision) -> None:
        pass

    def on_violations(self, events: Sequence[ViolationEvent]) -> None:
        pass

    def on_decision(self, decision: GuardDecision) -> None:
        pass

    def on_step(self, stats: StepStats) -> None:
        pass


VARIANTS = ("log", "log again", "isolate")
"""The timed variants: the log policy twice (the A/A pair that measures the noise), then isolate."""


BOOTSTRAP = 2000
"""Resamples of the rounds behind each interval (a fixed seed: the same rounds give the same verdict)."""


@dataclass(frozen=True)
class Verdict:
    """Whether the isolate policy's overhead over the log policy's step stands out of the run-to-run noise,
    from rounds paired in time (each round ran every variant, one after another)."""

    floor: float  # seconds: the median round's log-policy figure (mean of the two log variants)
    figure: float  # seconds: the median round's isolate figure
    overhead: float  # relative: the median over rounds of isolate / log-policy figure, minus one
    low: float  # the 95 % bootstrap interval of ``overhead``
    high: float
    noise: float  # relative: the median over rounds of |log again / log - 1| (the A/A pair's gap)
    rounds: int

    @property
    def measurable(self) -> bool:
        return self.low > 0.0

    def text(self) -> str:
        what = "measurable" if self.measurable else "not measurable"
        return (f"{what}: overhead {100 * self.overhead:+.1f}% (95% interval {100 * self.low:+.1f}% to "
                f"{100 * self.high:+.1f}%, {self.rounds} paired rounds), "
                f"run-to-run noise {100 * self.noise:.1f}% (A/A)")


def interval(values: Sequence[float], *, seed: int = 0) -> tuple[float, float]:
    """The 95 % bootstrap interval of the median of ``values`` (percentiles of :data:`BOOTSTRAP` resamples)."""
    rng = random.Random(seed)
    n = len(values)
    meds = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(BOOTSTRAP))
    return meds[int(0.025 * BOOTSTRAP)], meds[int(0.975 * BOOTSTRAP) - 1]


def verdict(rounds: dict[str, list[float]]) -> Verdict:
    """The verdict from every round's figure of each of :data:`VARIANTS` (seconds per call, one per round)."""
    log, again, iso = (rounds[v] for v in VARIANTS)
    base = [(a + b) / 2 for a, b in zip(log, again, strict=True)]
    ratios = [i / b - 1.0 for i, b in zip(iso, base, strict=True)]
    low, high = interval(ratios)
    noise = statistics.median(abs(b / a - 1.0) for a, b in zip(log, again, strict=True))
    return Verdict(floor=statistics.median(base), figure=statistics.median(iso), overhead=statistics.median(ratios),
                   low=low, high=high, noise=noise, rounds=len(ratios))


def add_rows(r: Report, case: str, rounds: dict[str, list[float]], *, unit: str) -> Verdict:
    """The isolate row (figure beside the log policy's floor, the verdict as its note) and the A/A row."""
    v = verdict(rounds)
    r.add(f"{case} isolate (nothing fires)", v.figure, v.floor, unit=unit, note=v.text())
    aa = verdict({"log": rounds["log"], "log again": rounds["log"], "isolate": rounds["log again"]})
    r.add(f"{case} log again (A/A: the noise)", statistics.median(rounds["log again"]),
          statistics.median(rounds["log"]), unit=unit,
          note="the same log-policy step, built and timed alike: floor = the first one; "
               f"paired {100 * aa.overhead:+.1f}% (95% interval {100 * aa.low:+.1f}% to {100 * aa.high:+.1f}%)")
    r.note(f"{case}: {v.text()}")
    return v


def manager_worlds(*, bs: int, ctx: int, device: torch.device, backend: str | None) -> dict[str, CanaryWorld]:
    worlds = {}
    for policy in VARIANTS:
        w = CanaryWorld(bs=bs, ctx=ctx, kv_heads=8, head_dim=128, device=device, mode=RealKvHashMode.PARTIAL,
                        backend=backend, chunk=min(ctx, 512))
        m, quiet = w.manager, _Quiet()
        m.add_sink(quiet)  # every variant hears the steps alike: the sink is not the policy
        if policy == "isolate":
            m.config = dataclasses.replace(m.config, on_violation=ViolationPolicy.ISOLATE)
            m.set_adapter(quiet)
        worlds[policy] = w
    return worlds


def engines(*, device: str, bs: int, ctx: int, steps: int, backend: str | None) -> dict[str, Any]:
    """Three demo engines serving the same requests, prefilled, one per variant of :data:`VARIANTS`."""
    return {name: prefilled_engine(
        CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, enable_verify_token=True, sweep_interval=2,
                     backend=backend, health_warmup_steps=10**6,
                     on_violation=ViolationPolicy.ISOLATE if name == "isolate" else None),
        device=device, bs=bs, ctx=ctx, steps=steps) for name in VARIANTS}


def recorded(engine: Any) -> int:
    """Events the engine's managers' journals have recorded so far."""
    return sum(m.journal.recorded + m.swa_journal.recorded for m in engine.managers)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--bs", type=int, default=None, help="requests per decode step (default 64; cpu 4)")
    p.add_argument("--ctx", type=int, default=None, help="context tokens per request (default 1024; cpu 128)")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--engine-steps", type=int, default=None, help="timed engine decode steps per policy (default 40)")
    p.add_argument("--out", default=None, help="write the JSON records here")
    args = p.parse_args(argv)
    dev = torch.device(args.device)
    cpu = dev.type == "cpu"
    if cpu:
        torch.set_num_threads(1)
    bs = args.bs or (4 if cpu else 64)
    ctx = args.ctx or (128 if cpu else 1024)
    r = Report(BENCH, machine(dev))
    print(f"{BENCH} on {r.machine}: bs={bs} ctx={ctx}; floor = the same step under the log policy")
    worlds = manager_worlds(bs=bs, ctx=ctx, device=dev, backend=args.backend)

    def stepper(w: CanaryWorld) -> timing.Fn:
        def run() -> None:
            w.step()
            w.manager.end_step()
        return run

    t = timing.interleaved_rounds({k: stepper(w) for k, w in worlds.items()}, calls=10, rounds=40, warmup=5,
                                  rotate=True)
    add_rows(r, f"manager_step bs={bs} ctx={ctx}", t, unit="us")
    assert not any(w.manager.events for w in worlds.values()), "a clean pool reported a violation"
    steps = args.engine_steps or 40
    ebs, ectx = (4, 64) if cpu else (16, 512)
    engs = engines(device=args.device, bs=ebs, ctx=ectx, steps=steps + 8, backend=args.backend)
    iso = engs["isolate"]
    for e in engs.values():  # the warm-up steps, outside the guard's own count below
        for _ in range(2):
            e.step()
    events0 = recorded(iso)
    fed: list[float] = []

    def iso_step() -> None:  # the guard's own time of each step (the bookkeeping here is the isolate row's)
        f0 = iso.guard.seconds
        iso.step()
        fed.append(iso.guard.seconds - f0)

    et = timing.interleaved_rounds({k: iso_step if k == "isolate" else e.step for k, e in engs.items()}, calls=1,
                                   rounds=steps, warmup=0, rotate=True)
    etag = f"kvcanary engine bs={ebs} ctx={ectx}"
    v = add_rows(r, f"engine_step (journal fed) {etag}", et, unit="ms")
    feed = statistics.median(fed)
    events = (recorded(iso) - events0) / steps
    r.add(f"engine_step: the isolate guard's journal feed per step {etag}", feed, journal_cost.append_seconds(events),
          unit="us", note=f"timed inside the isolate engine's steps (the median step's); {events:.1f} events a step; "
                          "floor: as many events copied into machine arrays")
    share = feed / v.floor
    r.value(f"engine_step: journal feed share {etag}", share * 100, None, unit="%",
            note="of the log policy's step: the part of the isolate overhead the feed explains")
    r.note(f"engine_step: the guard's journal feed is {100 * share:.2f}% of the step"
           + (f", within the run-to-run noise ({100 * v.noise:.1f}%)" if share <= v.noise else
              f", above the run-to-run noise ({100 * v.noise:.1f}%)"))
    failed = [rid for e in engs.values() for rid, q in e.requests.items() if q.state.value == "failed"]
    assert not failed, f"the isolate policy failed requests of a clean run: {failed}"
    r.write(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

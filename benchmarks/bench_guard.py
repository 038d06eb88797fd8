"""What the isolate policy costs when nothing fires, beside its floor: the same work under the log policy.

Cases:

- ``manager_step``: one decode step of the canary (plan, HEAD and TAIL verify + write, ``end_step``) over a
  paged pool whose records are all live, under ``log`` and under ``isolate`` with an adapter and a sink
  attached. The policy only acts on rows read back, so the floor is the log policy's step; the ratio is
  the overhead (1.00: not measurable).
- ``engine_step``: kvcanary's demo engine, decode steps under ``log`` and under ``isolate``; the isolate
  engine also feeds the slot journal (the slots each request row reads, the radix tree's changes), which is
  host work the engine's adapter does. Floor: the log policy's step.

Variants are interleaved (benchmarks/timing.py ``wall_interleaved``: the fastest round of each), so drift in
the machine hits both alike. Run from the repository root: ``python benchmarks/bench_guard.py [--device cuda]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks import timing
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


def manager_worlds(*, bs: int, ctx: int, device: torch.device, backend: str | None) -> dict[str, CanaryWorld]:
    worlds = {}
    for policy in ("log", "isolate"):
        w = CanaryWorld(bs=bs, ctx=ctx, kv_heads=8, head_dim=128, device=device, mode=RealKvHashMode.PARTIAL,
                        backend=backend, chunk=min(ctx, 512))
        if policy == "isolate":
            m = w.manager
            m.config = dataclasses.replace(m.config, on_violation=ViolationPolicy.ISOLATE)
            quiet = _Quiet()
            m.set_adapter(quiet)
            m.add_sink(quiet)
        worlds[policy] = w
    return worlds


def engines(*, device: str, bs: int, ctx: int, steps: int, backend: str | None) -> dict[str, object]:
    """Two demo engines serving the same requests, prefilled, one per policy."""
    return {"isolate" if policy else "log": prefilled_engine(
        CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, enable_verify_token=True, sweep_interval=2,
                     backend=backend, health_warmup_steps=10**6, on_violation=policy),
        device=device, bs=bs, ctx=ctx, steps=steps) for policy in (None, ViolationPolicy.ISOLATE)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--bs", type=int, default=None, help="requests per decode step (default 64; cpu 4)")
    p.add_argument("--ctx", type=int, default=None, help="context tokens per request (default 1024; cpu 128)")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--engine-steps", type=int, default=None, help="timed engine decode steps per policy (default 24)")
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

    t = timing.wall_interleaved({k: stepper(w) for k, w in worlds.items()}, calls=10, rounds=20, warmup=5)
    tag = f"bs={bs} ctx={ctx}"
    r.add(f"manager_step isolate (nothing fires) {tag}", t["isolate"], t["log"], note="floor: the log policy")
    assert not any(w.manager.events for w in worlds.values()), "a clean pool reported a violation"
    steps = args.engine_steps or 24
    ebs, ectx = (4, 64) if cpu else (16, 512)
    engs = engines(device=args.device, bs=ebs, ctx=ectx, steps=steps * 2 + 8, backend=args.backend)
    fns = {k: e.step for k, e in engs.items()}  # type: ignore[attr-defined]
    et = timing.wall_interleaved(fns, calls=1, rounds=steps, warmup=2)
    r.add(f"engine_step isolate (nothing fires, journal fed) kvcanary engine bs={ebs} ctx={ectx}", et["isolate"],
          et["log"], unit="ms", note="floor: the log policy")
    failed = [rid for e in engs.values() for rid, q in e.requests.items()  # type: ignore[attr-defined]
              if q.state.value == "failed"]
    assert not failed, f"the isolate policy failed requests of a clean run: {failed}"
    r.write(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The verification budget against full verification: cost per decode step and worst-case detection latency.

One paged pool of ``bs`` requests x ``ctx`` live tokens (benchmarks/bench_engine.py's ``CanaryWorld``, real-KV
PARTIAL, K and V), its canary step timed with full verification and with budgets of a quarter, a sixteenth and
a sixty-fourth of the live entries (replayed from a CUDA graph on a GPU, eager elsewhere). Each step time is
printed beside its traffic floor (the bytes it must move at the measured copy bandwidth); the latency is the
budget's period in steps (``VerifyBudget.period``: every live entry verified at least once that often) beside
full verification's one step.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks import floors, timing
from benchmarks.bench_engine import CanaryWorld
from benchmarks.report import Report, machine
from kvcanary.consts import RealKvHashMode
from kvcanary.manager import VerifyBudget

BENCH = "bench_budget"


def step_time(world: CanaryWorld, dev: torch.device, reps: int) -> tuple[float, str]:
    """Seconds per canary step: the CUDA-graph replay where the backends allow capture, else eager."""
    replay = world.graph_step()
    if replay is not None:
        return timing.device_time(replay, dev, reps=reps), "cuda_graph"
    return timing.device_time(world.step, dev, warmup=1, reps=reps), "eager"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--bs", type=int, default=None, help="requests per decode step (default 128; cpu 4)")
    p.add_argument("--ctx", type=int, default=None, help="context tokens per request (default 4096; cpu 256)")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--out", default=None, help="write the JSON records here")
    args = p.parse_args(argv)
    dev = torch.device(args.device)
    cpu = dev.type == "cpu"
    if cpu:
        torch.set_num_threads(1)
    bs = args.bs or (4 if cpu else 128)
    ctx = args.ctx or (256 if cpu else 4096)
    reps = 5 if cpu else 20
    r = Report(BENCH, machine(dev))
    bw = floors.copy_bandwidth(dev, 1 << (24 if cpu else 31))
    r.floor("copy bandwidth (B/s, read + written)", bw, "a device copy")
    live = bs * (ctx - 1)
    tag = f"bs={bs} ctx={ctx}"
    full_s = 0.0
    for frac in (None, 4, 16, 64):
        budget = None if frac is None else VerifyBudget(max_entries=live // frac)
        world = CanaryWorld(bs=bs, ctx=ctx, kv_heads=8, head_dim=128, device=dev, mode=RealKvHashMode.PARTIAL,
                            backend=args.backend, chunk=min(ctx, 512), budget=budget)
        secs, how = step_time(world, dev, reps)
        name = "full verification" if budget is None else f"budget 1/{frac} ({budget.max_entries} entries)"
        r.add(f"canary_step {how} {tag}, {name}", secs, world.bytes_floor() / bw)
        if budget is None:
            full_s = secs
            r.value(f"detection latency {tag}, {name}", 1, 1, unit="steps", note="every live entry, every step")
        else:
            period = budget.period(batch_size=bs, max_verify_len=ctx)
            r.value(f"cost vs full {tag}, {name}", secs / full_s, None, unit="x")
            r.value(f"detection latency {tag}, {name}", period, 1, unit="steps",
                    note="worst case: VerifyBudget.period")
        world.manager.end_step()
        world.manager.flush()
        if world.manager.total_violations:
            print(f"  WARNING: {world.manager.total_violations} violations on a clean pool")
        del world
    r.write(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

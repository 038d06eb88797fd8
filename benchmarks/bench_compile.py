"""What ``torch.compile`` support costs: host time per launch through the operator, and a compiled step.

1. **Host time per eager launch** of each operation's small valid call, issued through its
   ``torch.ops.kvcanary`` operator against the public launcher (both forced to the backend the registry picks),
   the variants interleaved round after round and the fastest round kept. The floor is the launcher: the ratio
   is what going through the dispatcher, the rebuild of the call and the operator's own check costs.
2. **A compiled decode step** (:mod:`tools.step_world`: plan, HEAD verify + write, a forward that
   writes K, TAIL verify + write with a PARTIAL real-KV fingerprint) at ``--bs`` one-token requests over
   ``--prefix`` cached tokens each, compiled with and without the canary launches (``mode="reduce-overhead"``,
   CUDA graphs through the compiler, on a GPU; the default mode on the CPU). The canary's cost is the
   difference; its floor is the same launches issued eagerly into a CUDA graph captured by hand (on the CPU:
   issued eagerly), so the ratio is what the compiler adds or saves.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks import timing
from benchmarks.report import Report, machine
from kvcanary.manager import CanaryBatch
from kvcanary.registry import REGISTRY, Op
from kvcanary.testing import calls
from kvcanary.testing.parity import launcher
from tools.step_world import StepWorld, batch_tensors, canary_step, forward_only

SMALL: dict[Op, Callable[[torch.device], dict[str, object]]] = {
    Op.VERIFY: calls.verify, Op.WRITE: calls.write, Op.PLAN: calls.plan, Op.SCATTER: calls.scatter,
}


def host_rows(r: Report, dev: torch.device) -> None:
    for op, make in SMALL.items():
        kw = make(dev)
        chosen = REGISTRY.select(op, dev, call=None).backend.name
        operator = kc.operators()[op]
        flat = operator.flatten(**kw)
        fns: dict[str, timing.Fn] = {
            "launcher": partial(launcher(op), **kw, backend=chosen),
            "operator": partial(operator.op, *flat, chosen),
        }
        best = timing.wall_interleaved(fns, calls=50, rounds=30, warmup=10)
        r.add(f"{op.value}: torch.ops.kvcanary.{op.value} [{chosen}]", best["operator"], best["launcher"],
              note="host time per eager launch; floor: the public launcher, same backend")


def decode_inputs(world: StepWorld, prefix: int) -> CanaryBatch:
    """Every row's next token after ``prefix`` cached ones (written by a prefill step first)."""
    bs, dev = world.rows, world.device
    rows = torch.arange(1, bs + 1, device=dev)
    r2t = world.req_to_token
    pre = CanaryBatch(req_pool_indices=rows, prefix_lens=torch.zeros(bs, dtype=torch.int64, device=dev),
                      extend_lens=torch.full((bs,), prefix, dtype=torch.int64, device=dev),
                      input_ids=(torch.arange(prefix, device=dev)[None, :] + 1000 * rows[:, None]).reshape(-1),
                      positions=torch.arange(prefix, device=dev).repeat(bs),
                      out_cache_loc=r2t[1:, :prefix].reshape(-1).to(torch.int64))
    canary_step(world, pre)
    return CanaryBatch(req_pool_indices=rows, prefix_lens=torch.full((bs,), prefix, dtype=torch.int64, device=dev),
                       extend_lens=torch.ones(bs, dtype=torch.int64, device=dev), input_ids=1000 * rows + prefix,
                       positions=torch.full((bs,), prefix, dtype=torch.int64, device=dev),
                       out_cache_loc=r2t[1:, prefix].to(torch.int64))


def step_rows(r: Report, dev: torch.device, bs: int, prefix: int) -> None:
    world = StepWorld.create(dev, rows=bs, max_len=prefix + 8)
    x = decode_inputs(world, prefix)
    mode = "reduce-overhead" if dev.type == "cuda" else "default"
    if dev.type == "cuda":
        world.mark_static()
        for t in batch_tensors(x):
            torch._dynamo.mark_static_address(t)
    with_canary = torch.compile(canary_step, mode=mode, fullgraph=True)
    without = torch.compile(forward_only, mode=mode, fullgraph=True)
    t_with = timing.wall(lambda: with_canary(world, x), calls=20, reps=7, warmup=3, include_gpu=True)
    t_without = timing.wall(lambda: without(world, x), calls=20, reps=7, warmup=3, include_gpu=True)
    launches = partial(canary_step, world, x)
    plain = partial(forward_only, world, x)
    if dev.type == "cuda":
        floor = timing.graph(launches, rounds=10) - timing.graph(plain, rounds=10)
        what = "the same launches captured by hand into a CUDA graph, minus the forward"
    else:
        floor = timing.wall(launches, calls=5, reps=5) - timing.wall(plain, calls=5, reps=5)
        what = "the same launches issued eagerly, minus the forward"
    case = f"bs {bs} x 1 token over {prefix} cached, PARTIAL"
    r.add(f"compiled step with canaries: {case}", t_with, t_without,
          note=f"mode={mode}; floor: the step compiled without canaries")
    r.add(f"canary cost per compiled step: {case}", t_with - t_without, floor, note=f"floor: {what}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default=None, help="write the records here")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--bs", type=int, default=None, help="requests per decode step (default: 128 on a GPU, 8 on CPU)")
    ap.add_argument("--prefix", type=int, default=None, help="cached tokens per request (default 1024 / 64)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    gpu = dev.type == "cuda"
    r = Report("bench_compile", machine(dev))
    host_rows(r, dev)
    step_rows(r, dev, args.bs or (128 if gpu else 8), args.prefix or (1024 if gpu else 64))
    r.write(args.out)


if __name__ == "__main__":
    main()

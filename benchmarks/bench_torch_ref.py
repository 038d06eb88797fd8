"""torch_ref on the CPU: verify of 10^6 entries, write of 64 requests x 512 tokens, plan bs=256 x 4096.

Target (issue 3): each under one second on the 2-core CI machine. The floor printed beside each time is the
bytes the operation must move at the CPU copy bandwidth measured in the same run (a 256 MiB copy, bytes read +
written): verify 88 B per entry (two 32-byte records, two 8-byte indices in, 8 B out), write 56 B per token
(the 32-byte record written, ids, positions and location read), plan 36 B per entry (32 B of entries
written, 4 B of ``req_to_token`` read); real-KV bytes are not counted. The ratio says how far a vectorized
torch reference sits from memory speed. Inputs come from ``tools.workloads``: the verify reads
clean random-predecessor records, the writes start fresh chains. ``--scale 0.01`` runs every case tiny.
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
from benchmarks import floors, timing
from benchmarks.report import Report, machine
from kvcanary.testing import builders
from tools import workloads

BYTES_PER_ELEMENT = {"verify": 88, "write": 56, "plan": 36}
MODES = (kc.RealKvHashMode.NONE, kc.RealKvHashMode.PARTIAL)
CPU = "cpu"


def verify_runs(n: int) -> list[tuple[str, Callable[[], None]]]:
    """A verify of ``n`` random entries per real-KV mode, over one world of ``n`` slots."""
    world = workloads.RandomPrevRecords(n, CPU)
    kv = workloads.byte_sources(n, 256, 1, CPU)
    (slots, prevs), = world.index_sets(n, 1)
    plan = world.plan(slots, prevs)
    runs: list[tuple[str, Callable[[], None]]] = []
    for mode in MODES:
        def run(mode: kc.RealKvHashMode = mode) -> None:
            ctx = world.context(kv if mode != kc.RealKvHashMode.NONE else (), mode)
            kc.launch_canary_verify_kernel(context=ctx, plan=plan, check_verify_expected_token=False,
                                           backend="torch_ref")
        runs.append((f"{n:,} entries, real-KV {mode.name}", run))
    return runs


def write_run(reqs: int, tokens: int, mode: kc.RealKvHashMode) -> Callable[[], None]:
    n = reqs * tokens
    ctx = builders.context(CPU, num_slots=n + 1, sources=workloads.byte_sources(n + 1, 256, 1, CPU), mode=mode)
    kw = workloads.chain_writes(ctx, [tokens] * reqs, torch.randperm(n) + 1)
    return partial(kc.launch_canary_write_kernel, **kw, backend="torch_ref")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default=None, help="write the records here (details go to raw/ beside it)")
    ap.add_argument("--scale", type=float, default=1.0, help="shrink every case (e.g. 0.01 for a quick check)")
    args = ap.parse_args()

    def scaled(x: int) -> int:
        return max(1, int(x * args.scale))

    r = Report("torch_ref_cpu", machine(CPU))
    bandwidth = floors.copy_bandwidth(CPU)
    r.floor("CPU copy bandwidth (B/s, read + written)", bandwidth, "a 256 MiB copy")
    n_verify, bs, prefix = scaled(1_000_000), scaled(256), scaled(4096)
    cases: list[tuple[str, str, Callable[[], None], int]] = [
        ("verify", label, run, n_verify) for label, run in verify_runs(n_verify)]
    cases += [("write", f"64 requests x {scaled(512)} tokens, real-KV {mode.name}", write_run(64, scaled(512), mode),
               64 * scaled(512)) for mode in MODES]
    batch = workloads.PlanBatch(bs, prefix, device=CPU, num_slots=1 << 20)
    cases.append(("plan", f"bs={bs}, {prefix}-token prefixes ({bs * prefix} entries)",
                  partial(kc.launch_canary_plan_kernels, **batch.kwargs(0), backend="torch_ref"), bs * prefix))
    for op, case, run, n in cases:
        t = timing.wall(run, reps=3)
        r.add(f"{op}: {case}", t, n * BYTES_PER_ELEMENT[op] / bandwidth, unit="ms",
              note=f"< 1000 ms: {'yes' if t < 1 else 'NO'}")
    r.write(args.out)


if __name__ == "__main__":
    main()

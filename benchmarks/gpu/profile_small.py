"""Where short launches spend their time: ``python benchmarks/gpu/profile_small.py CASE [--ncu]``.

Cases: ``write1`` (1024 one-token write requests, bench_cuda's case), ``plan16`` (the fused plan over 256
requests of 16 cached tokens: its fixed cost) and ``plan4096`` (bs=256 x 4096, bench_cuda's case). Without
``--ncu`` each case prints its CUDA-graph time beside its floors (an empty launch in a graph; for the plans,
their bytes at copy bandwidth, measured in the same run); with it, each case launches its kernel four times
eagerly, for ``ncu --launch-skip 2 --launch-count 1`` (source-level stall sampling shows what the prologue
waits on).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

import kvcanary as kc
from benchmarks import bench_cuda as bc
from benchmarks import floors_cuda as fc
from kvcanary.backends.cuda import plan as cplan
from kvcanary.backends.cuda import write as cwrite

Case = tuple[list[Callable[[], None]], int]
"""The launches of a case (called in turn), and the bytes one launch must move at least (0: negligible)."""


def write_one_token() -> Case:
    """bench_cuda's 1024 x 1 case: each request continues a seeded chain by one token."""
    num_slots = 1 << 16
    buf = torch.zeros(num_slots, 32, dtype=torch.uint8, device="cuda")
    locs = torch.randperm(num_slots - 1, device="cuda") + 1
    return [partial(cwrite.write, **bc.one_token_writes(bc._ctx(buf, (), kc.RealKvHashMode.NONE), locs))], 0


def plan(prefix: int) -> Case:
    world = bc.PlanWorld(prefix=prefix)
    # 4 B of req_to_token read and 32 B of entries written per entry
    return [partial(cplan.plan, **world.kwargs(i)) for i in range(len(world.vps))], 36 * world.entries


CASES: dict[str, Callable[[], Case]] = {
    "write1": write_one_token, "plan16": partial(plan, 16), "plan4096": partial(plan, 4096)}


def main() -> None:
    case = sys.argv[1]
    fns, nbytes = CASES[case]()
    if "--ncu" in sys.argv:
        for _ in range(4 // len(fns) + 1):
            for f in fns:
                f()
    else:
        t = fc.rotating_graph(fns) if len(fns) > 1 else fc.time_graph(fns[0], calls=100)
        floors = {"an empty launch": fc.empty_launch_cuda()["graph"]}
        if nbytes:
            floors["its bytes at copy bandwidth"] = nbytes / fc.copy_bandwidth_cuda()
        beside = "; ".join(f"floor {f * 1e6:.2f} us ({what}), ratio {t / f:.2f}x" for what, f in floors.items())
        print(f"{case}: {t * 1e6:.2f} us per launch (graph); {beside}")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()

"""The extension checks' cost on the GPU: each case with ``extensions=None``, with every flag off and with the
checks on, on the cuda and Triton backends (CUDA-graph replays).

``None`` runs the kernels every earlier release ran (the CUDA Specs and Triton constexprs of the default path
are unchanged), so its figures compare with earlier ``bench_backends`` records of the same cases, and the
``off / None`` ratio must be 1.00 within noise. ``on / None`` is the price of turning the checks on. The write
cases time ``None``, every flag off, and the write-time owner check alone (``owner``: request row r writes as
pool row r + 1, and the owner map gives every slot to the row that writes it, so the check runs on every token
and nothing fires); their write-slot check needs a request table, which these synthetic chains do not have
(its cost is one ``req_to_token`` read per token).
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks import floors, timing
from benchmarks.bench_backends import DEV, Case, plan_case, verify_case, write_case
from benchmarks.report import Report, machine
from kvcanary.registry import Op
from kvcanary.testing.parity import launcher
from tools import workloads

ON = kc.Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True)
OWNER = kc.Extensions(write_slot_owner_mismatch=True)
VARIANTS: dict[str, kc.Extensions | None] = {"None": None, "off": kc.Extensions(), "on": ON, "owner": OWNER}


def with_owner_map(kw: dict[str, Any]) -> dict[str, Any]:
    """A write's arguments plus the owner check's: request row r writes as pool row r + 1, and the owner map
    (-1 elsewhere) gives each slot to the row that writes it."""
    plan: kc.WritePlan = kw["plan"]
    loc: torch.Tensor = kw["out_cache_loc"]
    rows = plan.write_seed_slot_indices.shape[0]
    writer = torch.searchsorted(plan.write_offsets[1:], torch.arange(loc.shape[0], device=loc.device), right=True)
    owner = torch.full((kw["context"].canary_buf.shape[0],), -1, dtype=torch.int64, device=loc.device)
    live = loc >= 0
    owner[loc[live]] = writer[live] + 1
    return {**kw, "req_pool_indices": torch.arange(1, rows + 1, device=loc.device), "slot_owner": owner}


def time_variant(case: Case, backend: str, ext: kc.Extensions | None) -> float:
    """Seconds per graph replay of the case's argument sets with ``extensions=ext``."""
    sets: list[dict[str, Any]] = [case.make() for _ in range(case.sets)]
    if ext is not None and ext.write_slot_owner_mismatch:
        sets = [with_owner_map(kw) for kw in sets]
    fns = [partial(launcher(case.op), **kw, extensions=ext, backend=backend) for kw in sets]
    return timing.graph(fns, reps=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default=None, help="write the records here (details go to raw/ beside it)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_extensions: needs a CUDA device", file=sys.stderr)
        return
    r = Report("extensions_cost", machine(DEV))
    f = floors.common(r, DEV)
    bw, step, empty = f.copy_bandwidth, f.serial_step, f.empty_launch_graph
    world = workloads.RandomPrevRecords(1 << 24, DEV)
    kv = workloads.byte_sources(world.num_slots, 128, 2, DEV)
    cases = [verify_case(1 << 20, world, kc.RealKvHashMode.NONE, False, bw, kv),
             verify_case(1 << 20, world, kc.RealKvHashMode.NONE, True, bw, kv),
             verify_case(1 << 20, world, kc.RealKvHashMode.PARTIAL, False, bw, kv),
             plan_case(256, 4096, bw), plan_case(128, 512, bw),
             write_case(1024, 1, step, empty), write_case(64, 512, step, empty)]
    ratios: list[str] = []
    for case in cases:
        for backend in ("cuda", "triton"):
            got: dict[str, float] = {}
            for name, ext in VARIANTS.items():
                if name == ("on" if case.op == Op.WRITE else "owner"):  # the write cases have no request table
                    continue
                got[name] = t = time_variant(case, backend, ext)
                r.add(f"{case.name} [{backend}, extensions={name}]", t, case.floor_s, note=case.floor_what)
            line = (f"  {case.name:<44} {backend:<7} None {got['None'] * 1e6:9.2f} us  "
                    f"off/None {got['off'] / got['None']:5.2f}")
            for name in ("on", "owner"):
                if name in got:
                    line += f"  {name}/None {got[name] / got['None']:5.2f}"
            ratios.append(line)
    print("\nextensions cost (graph replays; off/None must be 1.00 within noise):")
    print("\n".join(ratios))
    r.write(args.out)


if __name__ == "__main__":
    main()

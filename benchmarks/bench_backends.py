"""Head to head: every GPU backend on identical inputs, per operation, to decide the registry's priorities.

Each case builds its inputs (``tools.workloads``) afresh for every run, runs every backend that can
serve the operation (forced by name, through the public launchers), checks that the outputs agree with
torch_ref's, and times CUDA-graph replays (events around eager launches for operations that are not
capture-safe). The floor beside each figure is the case's memory floor (bytes moved at the measured copy
bandwidth) or the serial-chain floor. The last table names the fastest backend per case.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks import floors, timing
from benchmarks.report import Report, machine
from kvcanary.registry import REGISTRY, Op
from kvcanary.testing import builders
from kvcanary.testing.parity import compare_outputs, launcher
from tools import workloads

DEV = torch.device("cuda")
Kwargs = dict[str, Any]


@dataclass
class Case:
    op: Op
    name: str
    make: Callable[[], Kwargs]  # fresh arguments (identical contents every call)
    outputs: Callable[[Kwargs], dict[str, torch.Tensor]]
    floor_s: float
    floor_what: str
    sets: int = 1  # argument sets called in turn in one graph (their memory rotates out of L2)


def _verify_outputs(kw: Kwargs) -> dict[str, torch.Tensor]:
    ctx: kc.VerifyOrWriteContext = kw["context"]
    return {"violation_write_index": ctx.violation_write_index, "slot_run_counter": ctx.slot_run_counter}


def verify_case(n: int, world: workloads.RandomPrevRecords, mode: kc.RealKvHashMode, chained: bool, bw: float,
                kv: tuple[kc.RealKvSource, ...]) -> Case:
    """Clean verify of ``n`` entries. Random layout: random upper-half slots of ``world``, each with its own
    lower-half predecessor (two independent random records per entry). Chained layout: requests of 1024
    positions over random distinct slots, stamped by a real write, each entry's predecessor the entry before."""
    sources = kv if mode != kc.RealKvHashMode.NONE else ()
    if chained:
        stamp = builders.context(DEV, num_slots=world.num_slots)
        gen = torch.Generator(device=DEV).manual_seed(n)
        slots = torch.randperm(world.num_slots - 1, device=DEV, generator=gen)[:n] + 1
        plan = workloads.stamp_chains(stamp, slots, 1024)

        def make() -> Kwargs:
            return {"context": builders.context(canary_buf=stamp.canary_buf, sources=sources, mode=mode), "plan": plan,
                    "check_verify_expected_token": False}
    else:
        (slots, prevs), = world.index_sets(n, 1, seed=n)
        plan = world.plan(slots, prevs)

        def make() -> Kwargs:
            return {"context": world.context(sources, mode), "plan": plan, "check_verify_expected_token": False}

    extra = {kc.RealKvHashMode.NONE: 0, kc.RealKvHashMode.PARTIAL: 16 * len(kv), kc.RealKvHashMode.ALL: 128}[mode]
    # bytes: two 32-B records + 24 B of plan per entry (+ strips), at copy bandwidth (optimistic for a random
    # gather; bench_cuda.py and bench_triton.py also report the measured gather floor)
    layout = "chained" if chained else "random prev"
    return Case(Op.VERIFY, f"verify {n >> 20} Mi, {mode.name}, {layout}", make, _verify_outputs,
                n * (64 + 24 + extra) / bw, "records + plan (+ strips) at copy bandwidth")


def write_case(reqs: int, tokens: int, step_s: float, empty_s: float) -> Case:
    n = reqs * tokens
    locs = torch.randperm(n, device=DEV) + 1

    def make() -> Kwargs:
        return workloads.chain_writes(builders.context(DEV, num_slots=n + 1), [tokens] * reqs, locs)

    floor, what = (tokens * step_s, "serial mix3 steps") if tokens > 1 else (empty_s, "empty kernel (graph)")
    return Case(Op.WRITE, f"write {reqs} x {tokens}", make, lambda kw: {"canary_buf": kw["context"].canary_buf},
                floor, what)


def plan_case(bs: int, prefix: int, bw: float) -> Case:
    def make() -> Kwargs:
        return workloads.PlanBatch(bs, prefix, device=DEV, seed=bs).kwargs(0)

    def outputs(kw: Kwargs) -> dict[str, torch.Tensor]:  # the fields a plan without a token pool must write
        vp: kc.VerifyPlan = kw["verify_plan_out"]
        return {"slots": vp.verify_slot_indices, "prevs": vp.verify_prev_slot_indices,
                "positions": vp.verify_expected_positions, "num_valid": vp.verify_num_valid, "enable": vp.enable,
                "seeds": kw["write_plan_out"].write_seed_slot_indices}

    return Case(Op.PLAN, f"plan bs={bs} x {prefix}, 4 rotating sets", make, outputs, bs * prefix * 36 / bw,
                "32 B of entries written + 4 B of req_to_token read per entry", sets=4)


def scatter_case(bs: int, per: int, bw: float) -> Case:
    # one set (12 MiB) sits in L2 between replays, and that one-launch figure swapped order between runs of
    # unchanged kernels; 8 sets (96 MiB) come from DRAM
    return Case(Op.SCATTER, f"scatter {bs} x {per}, 8 rotating sets",
                lambda: workloads.scatter_sets(bs, per, 1, DEV, seed=per)[0], lambda kw: {"pool_out": kw["pool_out"]},
                bs * per * 12 / bw, "8 B read + 4 B written per token", sets=8)


def time_backend(case: Case, backend: str) -> tuple[float, bool]:
    """(seconds per call, graph?) for one backend on one case: its ``sets`` argument sets called in turn."""
    fns = [partial(launcher(case.op), **case.make(), backend=backend) for _ in range(case.sets)]
    if REGISTRY.backends()[backend].ops[case.op].capture_safe:
        return timing.graph(fns, reps=30), True
    return timing.events(fns, reps=10), False


def agree(case: Case, backend: str) -> bool:
    """The backend's outputs equal torch_ref's; a verify also verifies clean."""
    a, b = case.make(), case.make()
    launcher(case.op)(**a, backend="torch_ref")
    launcher(case.op)(**b, backend=backend)
    ok = not compare_outputs({k: v.cpu() for k, v in case.outputs(b).items()}, case.outputs(a))
    if case.op == Op.VERIFY:
        ok = ok and int(b["context"].violation_write_index[0]) == 0
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default=None, help="write the records here (details go to raw/ beside it)")
    ap.add_argument("--quick", action="store_true", help="skip the 16 Mi verify cases")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_backends: needs a CUDA device", file=sys.stderr)
        return
    r = Report("backends_head_to_head", machine(DEV))
    f = floors.common(r, DEV)
    bw, step, empty = f.copy_bandwidth, f.serial_step, f.empty_launch_graph
    world = workloads.RandomPrevRecords(1 << 25, DEV)  # a 1 GiB canary buffer
    kv = workloads.byte_sources(world.num_slots, 128, 2, DEV)
    cases = []
    for n in ([1 << 20] if args.quick else [1 << 20, 1 << 24]):
        for chained in (False, True):
            cases.append(verify_case(n, world, kc.RealKvHashMode.NONE, chained, bw, kv))
        cases.append(verify_case(n, world, kc.RealKvHashMode.PARTIAL, False, bw, kv))
    cases += [write_case(1, 32768, step, empty), write_case(1024, 1, step, empty), write_case(64, 512, step, empty),
              plan_case(256, 4096, bw), scatter_case(256, 4096, bw)]
    best: dict[str, tuple[float, str]] = {}
    for case in cases:
        for name in ("cuda", "triton", "torch_ref"):
            b = REGISTRY.backends().get(name)
            if b is None or b.static_reasons(case.op, DEV):
                continue
            if name == "torch_ref" and case.op == Op.WRITE and "32768" in case.name:
                continue  # thousands of host-synced steps: not a contender
            ok = agree(case, name)
            t, graph = time_backend(case, name)
            r.add(f"{case.name} [{name}, {'graph' if graph else 'eager'}]{'' if ok else ' MISMATCH'}", t,
                  case.floor_s, note=case.floor_what)
            if ok and name != "torch_ref":
                key = f"{case.op.value}: {case.name}"
                if key not in best or t < best[key][0]:
                    best[key] = (t, name)
    r.details["fastest"] = {key: {"backend": name, "seconds": t} for key, (t, name) in best.items()}
    print("\nfastest backend per case:")
    for key, (t, name) in best.items():
        print(f"  {key:<48} {name:<8} {t * 1e6:9.2f} us")
    r.write(args.out)


if __name__ == "__main__":
    main()

"""Head to head: every GPU backend on identical inputs, per operation, to decide the registry's priorities.

Each case builds its inputs once, runs every backend that can serve the operation (forced by name), checks
that the outputs agree with torch_ref's, and times CUDA-graph replays (eager for operations that sync).
The floor printed beside each figure is the case's memory floor (bytes moved at the measured copy
bandwidth) or the serial-chain floor. The last table names the fastest backend per operation.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kvcanary as kc
from benchmarks import floors
from kvcanary.registry import REGISTRY, Op

DEV = torch.device("cuda")


@dataclass
class Case:
    op: Op
    name: str
    make: Callable[[], dict[str, Any]]  # fresh arguments (identical contents every call)
    outputs: Callable[[dict[str, Any]], list[torch.Tensor]]
    floor_s: float
    floor_what: str
    sets: int = 1  # argument sets called in turn in one graph (their memory rotates out of L2)


def ctx(num_slots: int, mode: kc.RealKvHashMode, sources: int = 0, nbpt: int = 128,
        kv: list[torch.Tensor] | None = None) -> kc.VerifyOrWriteContext:
    srcs = tuple(kc.RealKvSource(tensor=t, page_size=1, num_bytes_per_token=nbpt, read_bytes=nbpt)
                 for t in (kv or [])[:sources])
    return kc.VerifyOrWriteContext(
        canary_buf=torch.zeros(num_slots, 32, dtype=torch.uint8, device=DEV),
        kernel_kind=kc.CanaryLaunchTag.TAIL_K_FULL,
        violation_ring=torch.zeros(1024, 8, dtype=torch.int64, device=DEV),
        violation_write_index=torch.zeros(1, dtype=torch.int32, device=DEV),
        slot_run_counter=torch.zeros(1, dtype=torch.int64, device=DEV),
        kernel_run_counter=torch.zeros(1, dtype=torch.int64, device=DEV), real_kv_sources=srcs,
        real_kv_hash_mode=mode, enable_chain_position_assert=torch.ones(1, dtype=torch.int32, device=DEV))


def consistent_world(num_slots: int, kv: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Records where every upper-half slot s chains to lower-half slot p(s) (so random entries verify clean),
    with real-KV hashes of the PARTIAL fold over ``kv``; returns (records for NONE, records for PARTIAL)."""
    from kvcanary.backends.torch_ref._hash import mix3, splitmix64
    from kvcanary.backends.torch_ref._records import fold_sources

    half = num_slots // 2
    rec = torch.randint(-(2**62), 2**62, (num_slots, 4), dtype=torch.int64, device=DEV)
    rec[:, 1] = 0
    upper = torch.arange(half, num_slots, device=DEV)
    p = prev_of(upper, half)
    rec[upper, 2] = mix3(rec[p, 2], rec[p, 0], rec[p, 1])
    rec[:, 3] = 0
    partial = rec.clone()
    srcs = tuple(kc.RealKvSource(tensor=t, page_size=1, num_bytes_per_token=128, read_bytes=128) for t in kv)
    for start in range(0, num_slots, 1 << 22):
        idx = torch.arange(start, min(num_slots, start + (1 << 22)), device=DEV)
        partial[idx, 3] = fold_sources(srcs, int(kc.RealKvHashMode.PARTIAL), idx)[0]
    del splitmix64
    return rec, partial


def prev_of(slots: torch.Tensor, half: int) -> torch.Tensor:
    from kvcanary.backends.torch_ref._hash import splitmix64

    return 1 + (splitmix64(slots) & ((1 << 62) - 1)) % (half - 1)


def verify_case(n: int, num_slots: int, mode: kc.RealKvHashMode, chained: bool, bw: float,
                records: torch.Tensor, kv: list[torch.Tensor]) -> Case:
    """Clean verify of ``n`` entries. Random layout: random upper-half slots, each with its own lower-half
    predecessor (two independent random records per entry). Chained layout: requests of 1024 positions
    over random distinct slots, stamped by a real write, each entry's predecessor being the entry before."""
    g = torch.Generator(device=DEV).manual_seed(n + int(chained))
    half = num_slots // 2
    if chained:
        slots = (torch.randperm(num_slots - 1, device=DEV, generator=g) + 1)[:n]
        pos = torch.arange(n, device=DEV) % 1024
        prevs = torch.where(pos == 0, -1, torch.roll(slots, 1))
        stamp = ctx(num_slots, kc.RealKvHashMode.NONE)
        wp = kc.WritePlan.allocate(write_req_capacity=n // 1024, device=DEV)
        wp.write_offsets.copy_(torch.arange(n // 1024 + 1, device=DEV) * 1024)
        wp.write_seed_slot_indices.fill_(-1)
        wp.write_num_valid_reqs.fill_(n // 1024)
        kc.launch_canary_write_kernel(context=stamp, plan=wp, input_ids=torch.arange(n, device=DEV) % 50021,
                                      positions=pos, out_cache_loc=slots, enable_write_input_assert=False,
                                      expected_input_tokens=None, expected_input_positions=None)
        base = stamp.canary_buf.view(torch.int64).view(num_slots, 4).clone()
    else:
        slots = torch.randint(half, num_slots, (n,), device=DEV, generator=g)
        prevs = prev_of(slots, half)
        pos = torch.zeros_like(slots)
        base = records
    extra = {kc.RealKvHashMode.NONE: 0, kc.RealKvHashMode.PARTIAL: 16 * len(kv), kc.RealKvHashMode.ALL: 128}[mode]
    nsrc = 0 if mode == kc.RealKvHashMode.NONE else len(kv)
    # bytes: two 32-B records + 24 B of plan per entry (+ strips), at copy bandwidth (optimistic for a random
    # gather; bench_cuda.py and bench_triton.py also report the measured gather floor)
    floor = n * (64 + 24 + extra) / bw

    def make() -> dict[str, Any]:
        c = ctx(num_slots, mode, nsrc, kv=kv)
        c.canary_buf.view(torch.int64).view(num_slots, 4).copy_(base)
        plan = kc.VerifyPlan(
            verify_slot_indices=slots, verify_prev_slot_indices=prevs,
            verify_expected_positions=pos, verify_expected_tokens=torch.full_like(slots, -1),
            verify_num_valid=torch.tensor([n], dtype=torch.int32, device=DEV),
            enable=torch.ones(1, dtype=torch.int32, device=DEV))
        return {"context": c, "plan": plan, "check_verify_expected_token": False}

    layout = "chained" if chained else "random prev"
    return Case(Op.VERIFY, f"verify {n >> 20} Mi, {mode.name}, {layout}", make,
                lambda kw: [kw["context"].violation_write_index, kw["context"].slot_run_counter],
                floor, "records + plan (+ strips) at copy bandwidth")


def write_case(reqs: int, tokens: int, step_s: float, empty_s: float) -> Case:
    n = reqs * tokens
    num_slots = n + 1
    locs = torch.randperm(n, device=DEV) + 1

    def make() -> dict[str, Any]:
        plan = kc.WritePlan.allocate(write_req_capacity=reqs, device=DEV)
        plan.write_offsets.copy_(torch.arange(reqs + 1, device=DEV) * tokens)
        plan.write_seed_slot_indices.fill_(-1)
        plan.write_num_valid_reqs.fill_(reqs)
        e = torch.arange(n, device=DEV)
        return {"context": ctx(num_slots, kc.RealKvHashMode.NONE), "plan": plan, "input_ids": (e * 7919) % 50021,
                "positions": e % tokens, "out_cache_loc": locs,
                "enable_write_input_assert": False, "expected_input_tokens": None, "expected_input_positions": None}

    floor, what = (tokens * step_s, "serial mix3 steps") if tokens > 1 else (empty_s, "empty kernel (graph)")
    return Case(Op.WRITE, f"write {reqs} x {tokens}", make, lambda kw: [kw["context"].canary_buf], floor, what)


def plan_case(bs: int, prefix: int, bw: float) -> Case:
    g = torch.Generator(device=DEV).manual_seed(bs)
    r2t = torch.randint(1, 1 << 24, (bs + 1, prefix + 8), dtype=torch.int32, device=DEV, generator=g)

    def make() -> dict[str, Any]:
        vp = kc.VerifyPlan.allocate(verify_capacity=bs * prefix, device=DEV)
        wp = kc.WritePlan.allocate(write_req_capacity=bs, device=DEV)
        return {"verify_plan_out": vp, "write_plan_out": wp, "req_pool_indices": torch.arange(1, bs + 1, device=DEV),
                "prefix_lens": torch.full((bs,), prefix, device=DEV),
                "extend_seq_lens": torch.ones(bs, dtype=torch.int64, device=DEV), "req_to_token": r2t,
                "swa_window_size": 0, "full_to_swa_index_mapping": None, "verify_capacity": bs * prefix,
                "req_to_verify_expected_tokens": None, "req_to_verify_expected_tokens_valid_lens": None,
                "kv_token_id_vs_position_offset": 0}

    def outs(kw: dict[str, Any]) -> list[torch.Tensor]:
        vp = kw["verify_plan_out"]
        return [vp.verify_slot_indices, vp.verify_prev_slot_indices, vp.verify_expected_positions,
                vp.verify_num_valid, vp.enable, kw["write_plan_out"].write_seed_slot_indices]

    return Case(Op.PLAN, f"plan bs={bs} x {prefix}, 4 rotating sets", make, outs, bs * prefix * 36 / bw,
                "32 B of entries written + 4 B of req_to_token read per entry", sets=4)


def scatter_case(bs: int, per: int, bw: float) -> Case:
    def make() -> dict[str, Any]:
        g = torch.Generator(device=DEV).manual_seed(per)  # every set holds the same tokens, in its own memory
        return {"flat_in": torch.randint(0, 1 << 40, (bs * per,), device=DEV, generator=g),
                "offsets": torch.arange(bs + 1, device=DEV) * per,
                "req_pool_indices": torch.arange(1, bs + 1, device=DEV),
                "pool_out": torch.zeros(bs + 1, per, dtype=torch.int32, device=DEV)}

    # one set (12 MiB) sits in L2 between replays, and that one-launch figure swapped order between runs of
    # unchanged kernels; 8 sets (96 MiB) come from DRAM
    return Case(Op.SCATTER, f"scatter {bs} x {per}, 8 rotating sets", make, lambda kw: [kw["pool_out"]],
                bs * per * 12 / bw, "8 B read + 4 B written per token", sets=8)


def launch(op: Op) -> Callable[..., None]:
    from kvcanary.testing.parity import launcher

    return launcher(op)


def time_backend(case: Case, backend: str) -> tuple[float, bool]:
    """(seconds per call, graph?) for one backend on one case: its ``sets`` argument sets called in turn."""
    fn = launch(case.op)
    kws = [case.make() for _ in range(case.sets)]

    def each() -> None:
        for kw in kws:
            fn(**kw, backend=backend)

    each()  # compile / warm
    support = REGISTRY.backends()[backend].ops[case.op]
    if support.capture_safe:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            each()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            each()
        return floors.time_cuda(graph.replay, reps=30) / len(kws), True
    return floors.time_cuda(each, reps=10) / len(kws), False


def agree(case: Case, backend: str) -> bool:
    a, b = case.make(), case.make()
    launch(case.op)(**a, backend="torch_ref")
    launch(case.op)(**b, backend=backend)
    return all(torch.equal(x, y) for x, y in zip(case.outputs(a), case.outputs(b), strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=None, help="write results (JSON list of records) here")
    ap.add_argument("--quick", action="store_true", help="skip the 16 Mi verify cases")
    args = ap.parse_args()
    bw = floors.copy_bandwidth()
    step = floors.serial_step_floor()
    empty = floors.empty_launch_graph()
    num_slots = 1 << 25  # a 1 GiB canary buffer
    kv = [torch.randint(0, 256, (num_slots, 128), dtype=torch.uint8, device=DEV) for _ in range(2)]
    plain, partial = consistent_world(num_slots, kv)
    cases = []
    for n in ([1 << 20] if args.quick else [1 << 20, 1 << 24]):
        for chained in (False, True):
            cases.append(verify_case(n, num_slots, kc.RealKvHashMode.NONE, chained, bw, plain, kv))
        cases.append(verify_case(n, num_slots, kc.RealKvHashMode.PARTIAL, False, bw, partial, kv))
    cases += [write_case(1, 32768, step, empty), write_case(1024, 1, step, empty), write_case(64, 512, step, empty),
              plan_case(256, 4096, bw), scatter_case(256, 4096, bw)]
    machine = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    results: list[dict[str, Any]] = []
    best: dict[str, tuple[float, str]] = {}
    print(f"copy {bw / 1e12:.2f} TB/s, serial step {step * 1e9:.1f} ns, empty kernel in a graph {empty * 1e6:.2f} us")
    for case in cases:
        for name in ("cuda", "triton", "torch_ref"):
            b = REGISTRY.backends().get(name)
            if b is None or b.static_reasons(case.op, DEV):
                continue
            if name == "torch_ref" and case.op in (Op.WRITE,) and "32768" in case.name:
                continue  # thousands of host-synced steps: not a contender
            ok = agree(case, name)
            if case.op == Op.VERIFY:
                kw = case.make()
                launch(case.op)(**kw, backend=name)
                ok = ok and int(kw["context"].violation_write_index[0]) == 0  # the world verifies clean
            t, graph = time_backend(case, name)
            mode = "graph" if graph else "eager"
            print(floors.report(f"{case.name} [{name}, {mode}]{'' if ok else ' MISMATCH'}", t, case.floor_s,
                                what=case.floor_what))
            results.append({"benchmark": "backends_head_to_head", "case": f"{case.name} [{name}, {mode}]",
                            "figure": t * 1e6, "floor": case.floor_s * 1e6, "unit": "us", "ratio": t / case.floor_s,
                            "machine": machine, "date": date.today().isoformat()})
            if ok and name != "torch_ref":
                key = f"{case.op.value}: {case.name}"
                if key not in best or t < best[key][0]:
                    best[key] = (t, name)
    print("\nfastest backend per case:")
    for key, (t, name) in best.items():
        print(f"  {key:<48} {name:<8} {t * 1e6:9.2f} us")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

"""torch_ref on the CPU: verify of 10^6 entries, write of 64 requests x 512 tokens, plan bs=256 x 4096.

Target (issue 3): each under one second on the 2-core CI machine. The floor printed beside each time is the
bytes the operation must move at the CPU copy bandwidth measured in the same run (a 256 MiB ``copy_``, bytes
read + written): verify 88 B per entry (two 32-byte records, two 8-byte indices in, 8 B out), write 56 B per
token (the 32-byte record written, ids, positions and location read), plan 36 B per entry (32 B of entries
written, 4 B of ``req_to_token`` read); real-KV bytes are not counted. The ratio says how far a vectorized
torch reference sits from memory speed.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from datetime import date

import torch

import kvcanary as kc


def timed(fn: Callable[[], None], reps: int = 3) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


BYTES_PER_ELEMENT = {"verify": 88, "write": 56, "plan": 36}


def copy_bandwidth(nbytes: int = 1 << 28) -> float:
    """Bytes per second (read + written) of a large CPU tensor copy."""
    a = torch.ones(nbytes // 2, dtype=torch.uint8)
    b = torch.empty_like(a)

    def run() -> None:
        b.copy_(a)

    return nbytes / timed(run, reps=5)


def context(num_slots: int, mode: kc.RealKvHashMode) -> kc.VerifyOrWriteContext:
    kv = torch.randint(0, 256, (num_slots, 256), dtype=torch.uint8)
    return kc.VerifyOrWriteContext(
        canary_buf=torch.zeros(num_slots, 32, dtype=torch.uint8), kernel_kind=kc.CanaryLaunchTag.TAIL_K_FULL,
        violation_ring=torch.zeros(1024, 8, dtype=torch.int64), violation_write_index=torch.zeros(1, dtype=torch.int32),
        slot_run_counter=torch.zeros(1, dtype=torch.int64), kernel_run_counter=torch.zeros(1, dtype=torch.int64),
        real_kv_sources=(kc.RealKvSource(tensor=kv, page_size=1, num_bytes_per_token=256, read_bytes=256),),
        real_kv_hash_mode=mode, enable_chain_position_assert=torch.ones(1, dtype=torch.int32))


def bench_write(reqs: int, tokens: int, mode: kc.RealKvHashMode) -> tuple[float, kc.VerifyOrWriteContext]:
    n = reqs * tokens
    ctx = context(n + 1, mode)
    plan = kc.WritePlan.allocate(write_req_capacity=reqs, device="cpu")
    plan.write_offsets.copy_(torch.arange(reqs + 1) * tokens)
    plan.write_seed_slot_indices.fill_(-1)
    plan.write_num_valid_reqs.fill_(reqs)
    ids = torch.randint(0, 50000, (n,))
    pos = (torch.arange(n) % tokens).to(torch.int64)
    loc = torch.randperm(n) + 1

    def run() -> None:
        kc.launch_canary_write_kernel(context=ctx, plan=plan, input_ids=ids, positions=pos, out_cache_loc=loc,
                                      enable_write_input_assert=False, expected_input_tokens=None,
                                      expected_input_positions=None, backend="torch_ref")

    return timed(run), ctx


def bench_verify(n: int, mode: kc.RealKvHashMode) -> float:
    ctx = context(n + 1, mode)
    plan = kc.VerifyPlan.allocate(verify_capacity=n, device="cpu")
    plan.verify_slot_indices.copy_(torch.randperm(n) + 1)
    plan.verify_prev_slot_indices.copy_(torch.randint(1, n, (n,)))
    plan.verify_expected_positions.zero_()
    plan.verify_expected_tokens.fill_(-1)
    plan.verify_num_valid.fill_(n)

    def run() -> None:
        ctx.violation_write_index.zero_()
        kc.launch_canary_verify_kernel(context=ctx, plan=plan, check_verify_expected_token=False, backend="torch_ref")

    return timed(run)


def bench_plan(bs: int, prefix: int) -> float:
    vp = kc.VerifyPlan.allocate(verify_capacity=bs * prefix, device="cpu")
    wp = kc.WritePlan.allocate(write_req_capacity=bs, device="cpu")
    r2t = torch.randint(1, 1 << 20, (bs + 1, prefix + 8), dtype=torch.int32)

    def run() -> None:
        kc.launch_canary_plan_kernels(
            verify_plan_out=vp, write_plan_out=wp, req_pool_indices=torch.arange(1, bs + 1),
            prefix_lens=torch.full((bs,), prefix), extend_seq_lens=torch.ones(bs, dtype=torch.int64), req_to_token=r2t,
            swa_window_size=0, full_to_swa_index_mapping=None, verify_capacity=bs * prefix,
            req_to_verify_expected_tokens=None, req_to_verify_expected_tokens_valid_lens=None,
            kv_token_id_vs_position_offset=0, backend="torch_ref")

    return timed(run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=None, help="write results as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows = []
    for mode in (kc.RealKvHashMode.NONE, kc.RealKvHashMode.PARTIAL):
        t = bench_verify(1_000_000, mode)
        rows.append(("verify", f"1e6 entries, real-KV {mode.name}", t, 1_000_000))
    for mode in (kc.RealKvHashMode.NONE, kc.RealKvHashMode.PARTIAL):
        t, _ = bench_write(64, 512, mode)
        rows.append(("write", f"64 requests x 512 tokens, real-KV {mode.name}", t, 64 * 512))
    t = bench_plan(256, 4096)
    rows.append(("plan", "bs=256, 4096-token prefixes (1 Mi entries)", t, 256 * 4096))
    bandwidth = copy_bandwidth()
    print(f"CPU copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + written)")
    machine = f"{platform.machine()} CPU, {torch.get_num_threads()} threads, torch {torch.__version__}"
    results = []
    print(f"{'op':<8} {'case':<46} {'time':>10} {'floor':>10} {'ratio':>8}  target")
    for op, case, t, n in rows:
        floor = n * BYTES_PER_ELEMENT[op] / bandwidth
        print(f"{op:<8} {case:<46} {t * 1e3:8.1f} ms {floor * 1e3:7.2f} ms {t / floor:7.1f}x  "
              f"< 1000 ms: {'yes' if t < 1 else 'NO'}")
        results.append({"benchmark": "torch_ref_cpu", "case": f"{op}: {case}", "figure": t * 1e3,
                        "floor": floor * 1e3, "unit": "ms", "ratio": t / floor, "machine": machine,
                        "date": date.today().isoformat()})
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

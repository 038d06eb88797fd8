"""Exercise every triton-backend kernel, hostile inputs included, for compute-sanitizer; check results too.

Run (from the repository root, on the GPU machine, TRITON_INTERPRET unset)::

    compute-sanitizer --tool memcheck  --error-exitcode 3 python benchmarks/gpu/sanitize_triton.py
    compute-sanitizer --tool racecheck --error-exitcode 3 python benchmarks/gpu/sanitize_triton.py --quick
    compute-sanitizer --tool synccheck --error-exitcode 3 python benchmarks/gpu/sanitize_triton.py --quick

torch's caching allocator is turned off (each tensor is its own cudaMalloc, so an access just past a tensor
lies outside every allocation and memcheck reports it). The script runs the golden vectors (verify, write,
plan, scatter, pipelines), hostile random scenarios of every operation (both plan stages alone included),
engine-sized calls of each real-KV mode, and edge cases (empty batches, a zero-length plan, a full ring,
8-byte-aligned records), and compares every result with torch_ref on the CPU. Exit status: 0 clean, 1 a
result differs (with --error-exitcode the sanitizer's own status reports memory errors and races).

Compiling the kernels happens on first use and is slow under the sanitizer: run the script once without
it first so that Triton's on-disk cache is warm.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

import kvcanary as kc
from kvcanary.registry import Op
from kvcanary.testing import golden as g
from kvcanary.testing.parity import check_call, compare_outputs
from kvcanary.testing.scenarios import GENERATORS, Call
from tests.backends.triton import _large, _support

if "triton" not in kc.registered_backends():  # a checkout that is not pip-installed has no entry-point metadata
    from kvcanary.backends.triton import BACKEND as _TRITON

    kc.register_backend(_TRITON)


def _generators() -> dict[str, object]:
    return {
        "verify": GENERATORS[Op.VERIFY], "plan": GENERATORS[Op.PLAN], "scatter": GENERATORS[Op.SCATTER],
        "write": lambda rng, hostile: _support.without_unspecified(GENERATORS[Op.WRITE](rng, hostile=hostile)),
        "plan_offsets": _support.plan_offsets_call, "plan_entries": _support.plan_entries_call,
    }


def _edge_calls(rng: random.Random) -> list[Call]:
    calls = []
    for mode in kc.RealKvHashMode:
        calls.append(_large.verify_call(rng, num_slots=4096, nreq=16, length=70, mode=mode, num_sources=4,
                                        corruptions=6))
        calls.append(_large.write_call(rng, num_slots=8192, nreq=1, length=5000, mode=mode, num_sources=3))
        calls.append(_large.write_call(rng, num_slots=4096, nreq=64, length=9, mode=mode, num_sources=1))
    calls.append(_large.plan_call(rng, bs=300, max_seq=200, num_slots=4096, swa=0, with_pool=True))
    calls.append(_large.plan_call(rng, bs=1, max_seq=3, num_slots=64, swa=2, with_pool=False))
    calls.append(_large.plan_call(rng, bs=0, max_seq=3, num_slots=64, swa=0, with_pool=False))
    calls.append(_large.plan_call(rng, bs=4096, max_seq=8, num_slots=4096, swa=5, with_pool=True))
    return calls


def _golden(failures: list[str]) -> None:
    runners = {"verify_cases": g.run_verify, "write_cases": g.run_write, "plan_cases": g.run_plan,
               "scatter_cases": g.run_scatter}
    for name, run in runners.items():
        for case in g.load(name):
            ctx = case.inputs.get("context")
            base = None if ctx is None else int(g.req(ctx["violation_write_index"])[0])
            got = run(case, "cuda", "triton")
            problems = compare_outputs(got, g.expected(case), base=base, order_sensitive=case.ring_order_sensitive)
            if problems:
                failures.append(f"{case.name}: {problems}")
    for case in g.load("pipeline_cases"):
        base = 0
        for step, (got, want) in enumerate(zip(g.run_pipeline(case, "cuda", "triton"), g.expected_pipeline(case),
                                               strict=True)):
            problems = compare_outputs(got, want, base=base)
            if problems:
                failures.append(f"{case.name} step {step}: {problems}")
            base = int(want["violation_write_index"][0])


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer random scenarios (racecheck/synccheck are slow)")
    ap.add_argument("--count", type=int, default=None, help="random scenarios per operation and hostility")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        print("needs a CUDA device and TRITON_INTERPRET unset", file=sys.stderr)
        return 2
    seed = a.seed if a.seed is not None else time.time_ns() % 2**32
    count = a.count if a.count is not None else (3 if a.quick else 20)
    print(f"sanitize_triton: seed={seed} count={count}", flush=True)
    rng = random.Random(seed)
    failures: list[str] = []
    t0 = time.time()
    _golden(failures)
    print(f"  golden done ({time.time() - t0:.0f}s)", flush=True)
    for name, gen in _generators().items():
        for hostile in (False, True):
            for k in range(count):
                call = gen(rng, hostile=hostile)  # type: ignore[operator]
                problems = check_call(call, "cuda", "triton")
                if problems:
                    failures.append(f"{name} hostile={hostile} #{k}: {problems}")
    print(f"  random done ({time.time() - t0:.0f}s)", flush=True)
    for call in _edge_calls(rng):
        problems = check_call(call, "cuda", "triton")
        if problems:
            failures.append(f"{call.label}: {problems}")
    torch.cuda.synchronize()
    print(f"  edge cases done ({time.time() - t0:.0f}s)", flush=True)
    for f in failures:
        print("MISMATCH", f)
    print(f"sanitize_triton: {len(failures)} mismatches (seed={seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

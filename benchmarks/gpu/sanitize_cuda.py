"""Exercise every cuda-backend kernel, hostile inputs included, for compute-sanitizer; check results too.

Run (from the repository root)::

    compute-sanitizer --tool memcheck  --error-exitcode 3 python benchmarks/gpu/sanitize_cuda.py
    compute-sanitizer --tool racecheck --error-exitcode 3 python benchmarks/gpu/sanitize_cuda.py --quick
    compute-sanitizer --tool synccheck --error-exitcode 3 python benchmarks/gpu/sanitize_cuda.py --quick

It turns off torch's caching allocator (every tensor is its own cudaMalloc, so an access one element past a
tensor is outside any allocation and memcheck sees it), compiles with -lineinfo, runs the golden vectors, the
pipelines, hostile random scenarios of every operation and edge cases (empty capacities, disabled and
negative plans, a full ring, 8-byte-aligned records, sources shorter than the buffer), and compares every
result with torch_ref on the CPU. Exit status: 0 clean, 1 a result differs (the sanitizer's own status,
with --error-exitcode, reports memory errors).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
os.environ.setdefault("KVCANARY_CUDA_LINEINFO", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

from kvcanary.registry import Op
from kvcanary.testing import golden as g
from tests.backends.cuda import _support


def _edge_calls() -> list[_support.Call]:
    """Small calls at the edges: what a sanitizer run must see once each."""
    import random

    calls = [
        _support.big_verify_call(1, chains=3, length=4, nsrc=4, mode=2, check=True),
        _support.big_verify_call(2, chains=5, length=3, nsrc=1, mode=1, check=False, corrupt=3),
        _support.big_write_call(3, requests=4, max_len=70, nsrc=4, mode=2, assert_inputs=True),
        _support.big_write_call(4, requests=3, max_len=33, nsrc=0, mode=0, assert_inputs=True),
        _support.big_plan_call(5, bs=7, max_prefix=40, lut=True, pool=True, window=9),
        _support.big_plan_call(6, bs=1, max_prefix=3, lut=False, pool=False),
        _support.big_scatter_call(7, bs=6, rows=3, cols=40),
    ]
    rng = random.Random(8)
    for op in _support.ALL_GENERATORS:  # the generators' own edge draws: enable 0/2, num_valid < 0, full rings
        calls += [_support.ALL_GENERATORS[op](rng, hostile=True) for _ in range(3)]
    return calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer random scenarios (racecheck/synccheck are slow)")
    ap.add_argument("--count", type=int, default=None, help="random scenarios per operation and mode")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("sanitize_cuda: no CUDA device")
        return 2
    reason = _support.cuda_skip_reason()
    if reason:
        print(f"sanitize_cuda: the cuda backend is unavailable: {reason}")
        return 2
    count = a.count if a.count is not None else (4 if a.quick else 25)
    seed = a.seed if a.seed is not None else _support.fuzz_seed()
    t0 = time.time()
    failures: list[str] = []
    ran = 0

    for _file, case in _support.golden_cases():
        if a.quick and ran % 4:
            ran += 1
            continue
        failures += [f"golden {case.name}: {p}" for p in _support.check_golden(case, "cuda", "cuda")]
        ran += 1
    for case in g.load("pipeline_cases"):
        failures += [f"pipeline {case.name}: {p}" for p in _support.check_pipeline(case, "cuda", "cuda")]
        ran += 1
    for call in _edge_calls():
        problems = _support.check_call(call, "cuda", "cuda")
        failures += [f"edge {call.label}: {p}" for p in problems or []]
        ran += 1
    for op in _support.ALL_GENERATORS:
        for hostile in (False, True):
            failures += _support.fuzz(op, "cuda", "cuda", seed=seed + int(hostile), count=count, hostile=hostile)
            ran += count
    torch.cuda.synchronize()
    ops = ", ".join(o.value for o in Op)
    print(f"sanitize_cuda: {ran} launches' worth of checks over {ops} in {time.time() - t0:.1f} s, seed {seed}")
    for f in failures[:40]:
        print("  MISMATCH", f)
    print("sanitize_cuda: " + ("all results match torch_ref" if not failures else f"{len(failures)} mismatches"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Exercise every kernel of a GPU backend, hostile inputs included, for compute-sanitizer; check results too.

Run (from the repository root, on the GPU machine, TRITON_INTERPRET unset)::

    compute-sanitizer --tool memcheck  --error-exitcode 3 python tests/gpu/sanitize.py --backend cuda
    compute-sanitizer --tool racecheck --error-exitcode 3 python tests/gpu/sanitize.py --backend triton --quick
    compute-sanitizer --tool synccheck --error-exitcode 3 python tests/gpu/sanitize.py --backend cuda --quick
    compute-sanitizer --tool memcheck  --error-exitcode 3 python tests/gpu/sanitize.py --backend cuda --extensions
    compute-sanitizer --tool memcheck  --error-exitcode 3 python tests/gpu/sanitize.py --backend triton --ops plan

A script, not a pytest module (``tools/gpu_session.sh`` runs it under the sanitizer). It turns off torch's
caching allocator (every tensor is its own cudaMalloc, so an access one element past a tensor is outside any
allocation and memcheck sees it), asks the cuda backend for -lineinfo, runs the golden vectors and the
pipelines, hostile random scenarios of every operation and larger edge calls of both sizes (engine-sized
rows, empty batches, a zero-length plan, short sources, 8-byte-aligned records from the scenarios), and
compares every result with torch_ref on the CPU; then the extension checks' golden vectors and owner
scenarios, and hostile calls of every operation with every extension on (``--extensions`` runs only these;
``--ops plan,write`` only the named operations' cases, after a change to their kernels). Exit status: 0 clean, 1 a
result differs, 2 the backend cannot run here (with --error-exitcode the sanitizer's own status reports memory errors and races).

Triton compiles its kernels on first use, slowly under the sanitizer: run the script once without it first so
that Triton's on-disk cache is warm.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
os.environ.setdefault("KVCANARY_CUDA_LINEINFO", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

import kvcanary as kc
from kvcanary.registry import REGISTRY, Op
from kvcanary.testing import builders
from kvcanary.testing.parity import check_call
from tests.backends import _extensions as X
from tests.backends.cuda import _support
from tests.golden import loader as g
from tools import scenarios as sc
from tools.scenarios import fuzz

PIPELINE_OPS = frozenset({Op.PLAN, Op.VERIFY, Op.WRITE})
GOLDEN_OPS = {"verify": Op.VERIFY, "write": Op.WRITE, "plan": Op.PLAN, "scatter": Op.SCATTER}  # by file name


def _edge_calls(rng: random.Random) -> list[builders.Call]:
    """Calls at the edges, each seen once by the sanitizer: small ones with every hostile feature, engine-sized
    ones of every real-KV mode, plans of 0, 1 and 4096 rows."""
    calls = [
        _support.large_verify(1, chains=3, length=4, sources=4, mode=2, check=True),
        _support.large_verify(2, chains=5, length=3, sources=1, mode=1, check=False, corruptions=3),
        _support.large_write(3, requests=4, length=70, sources=4, mode=2, assert_inputs=True),
        _support.large_write(4, requests=3, length=33, sources=0, mode=0, assert_inputs=True),
        sc.large_plan_call(5, bs=7, max_prefix=40, lut=True, pool=True, window=9),
        sc.large_plan_call(6, bs=1, max_prefix=3),
        sc.large_scatter_call(7, bs=6, rows=3, cols=40),
    ]
    for mode in kc.RealKvHashMode:
        calls.append(sc.large_verify_call(rng, chains=16, length=70, sources=4, mode=mode, corruptions=6,
                                          num_slots=4096))
        calls.append(sc.large_write_call(rng, requests=1, length=5000, sources=3, mode=mode, num_slots=8192))
        calls.append(sc.large_write_call(rng, requests=64, length=9, sources=1, mode=mode, num_slots=4096))
    calls.append(sc.large_plan_call(rng, bs=300, max_prefix=200, pool=True, num_slots=4096))
    calls.append(sc.large_plan_call(rng, bs=1, max_prefix=3, window=2, num_slots=64))
    calls.append(sc.large_plan_call(rng, bs=0, max_prefix=3, num_slots=64))
    calls.append(sc.large_plan_call(rng, bs=4096, max_prefix=8, window=5, pool=True, num_slots=4096))
    return calls


def _extension_failures(backend: str, device: str, rng: random.Random, count: int, quick: bool,
                        ops: frozenset[Op]) -> list[str]:
    """The extension golden vectors (a quarter with ``quick``), fresh owner scenarios, and hostile calls of
    every operation with every extension on (write: random tables and owner map), each against torch_ref."""
    failures: list[str] = []
    for k, case in enumerate(json.loads((g.DIR / "extensions_cases.json").read_text())["cases"]):
        if (quick and k % 4) or not ops >= PIPELINE_OPS:  # each case is a plan, verify and write pipeline
            continue
        ext = None if case["extensions"] is None else kc.Extensions(**case["extensions"])
        if X.run(case["scenario"], backend, ext, device) != case["outputs"]:
            failures.append(f"extensions golden {case['name']}")
    for _ in range(count if ops >= PIPELINE_OPS else 0):
        seed = rng.randrange(10**6, 10**7)
        scen = X.make_owner(seed)
        if X.run(scen, backend, X.ALL, device) != X.run(scen, "torch_ref", X.ALL):
            failures.append(f"owner scenario {seed}")
    for op in (Op.PLAN, Op.PLAN_ENTRIES, Op.VERIFY, Op.WRITE):
        for i in range(count if op in ops else 0):
            call = X.with_extensions(sc.GENERATORS[op](rng, hostile=True), rng)
            failures += [f"extensions {op.value} call {i}: {p}" for p in check_call(call, device, backend)]
    return failures


def _unavailable(backend: str) -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device"
    if backend == "triton" and os.environ.get("TRITON_INTERPRET") == "1":
        return "TRITON_INTERPRET=1 (the interpreter is not the compiled kernel)"
    if backend == "cuda":
        return _support.cuda_skip_reason()
    if backend not in kc.registered_backends():  # a checkout that is not pip-installed has no entry points
        from kvcanary_backends.triton import BACKEND

        kc.register_backend(BACKEND)
    reasons = REGISTRY.explain(Op.VERIFY, torch.device("cuda")).get(backend)
    return "; ".join(str(r) for r in reasons) if reasons else None


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--backend", choices=("cuda", "triton"), required=True)
    ap.add_argument("--quick", action="store_true", help="fewer random scenarios (racecheck/synccheck are slow)")
    ap.add_argument("--count", type=int, default=None, help="random scenarios per operation and hostility")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--extensions", action="store_true", help="only the extension checks' vectors and calls")
    ap.add_argument("--ops", default=",".join(op.value for op in Op),
                    help="comma-separated operations whose cases run (default: every one)")
    a = ap.parse_args()
    ops = frozenset(Op.named(o.strip()) for o in a.ops.split(",") if o.strip())
    backend: str = a.backend
    reason = _unavailable(backend)
    if reason:
        print(f"sanitize {backend}: cannot run here: {reason}", file=sys.stderr)
        return 2
    count = a.count if a.count is not None else (4 if a.quick else 25)
    seed = a.seed if a.seed is not None else _support.fuzz_seed()
    print(f"sanitize {backend}: seed={seed} count={count}", flush=True)
    t0 = time.time()
    failures: list[str] = []
    if not a.extensions:
        for k, (file, case) in enumerate(_support.golden_cases()):
            if (not a.quick or k % 4 == 0) and GOLDEN_OPS[file.split("_")[0]] in ops:
                failures += [f"golden {case.name}: {p}" for p in _support.check_golden(case, "cuda", backend)]
        for case in g.load("pipeline_cases") if ops >= PIPELINE_OPS else ():
            failures += [f"pipeline {case.name}: {p}" for p in _support.check_pipeline(case, "cuda", backend)]
        print(f"  golden done ({time.time() - t0:.0f} s)", flush=True)
        for op in (o for o in sc.GENERATORS if o in ops):
            for hostile in (False, True):
                failures += fuzz(op, "cuda", backend, seed=seed + int(hostile), count=count, hostile=hostile)
        print(f"  random done ({time.time() - t0:.0f} s)", flush=True)
        for call in (c for c in _edge_calls(random.Random(seed)) if c.op in ops):
            failures += [f"edge {call.label}: {p}" for p in check_call(call, "cuda", backend)]
        torch.cuda.synchronize()
        print(f"  edge cases done ({time.time() - t0:.0f} s)", flush=True)
    failures += _extension_failures(backend, "cuda", random.Random(seed + 2), count, a.quick, ops)
    torch.cuda.synchronize()
    print(f"  extensions done ({time.time() - t0:.0f} s)", flush=True)
    for f in failures[:40]:
        print("  MISMATCH", f)
    print(f"sanitize {backend}: " + ("all results match torch_ref" if not failures else f"{len(failures)} mismatches")
          + f" (seed {seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Wave 3, session 2, what wave3d's bounds cut: memcheck over the changed Triton kernels (plan, write) with room
# to finish, the manager's host time per step (bench_transformers, one round), racecheck over the same kernels.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
step memcheck_triton 110 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 tests/gpu/sanitize.py --backend triton --quick --ops plan,write
step bench_transformers 170 python3 benchmarks/bench_transformers.py --device cuda --rounds 1 \
    --out "$OUT/bench_transformers_cuda.json"
sed -n '/^== bench_transformers/,$p' "$OUT/bench_transformers.log" | cut -c1-150
step racecheck_triton 50 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 tests/gpu/sanitize.py --backend triton --quick --count 2 --ops plan,write
exit $rc

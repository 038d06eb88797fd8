#!/usr/bin/env bash
# Wave 3, session 2, first GPU call: wave3b (transformers' continuous batching with the isolate policy on each
# GPU backend, the served canary over HTTP on cuda), then the "before" figures of the manager's host time
# per step (bench_transformers) and of the isolate policy's overhead (bench_guard) on this commit.
set -u
mkdir -p "$OUT"
rc=0
OUT="$OUT" timeout 330 bash tools/gpu/wave3b.sh
r=$?; rc=$((rc | r)); echo "wave3b: rc=$r"
timeout 120 python3 benchmarks/bench_transformers.py --device cuda --rounds 2 --out "$OUT/bench_transformers_cuda.json" \
    >"$OUT/bench_transformers.log" 2>&1
r=$?; rc=$((rc | r)); echo "bench_transformers: rc=$r"; sed -n '/^== bench_transformers/,$p' "$OUT/bench_transformers.log" | cut -c1-150
timeout 90 python3 benchmarks/bench_guard.py --device cuda --out "$OUT/bench_guard_cuda.json" >"$OUT/bench_guard.log" 2>&1
r=$?; rc=$((rc | r)); echo "bench_guard: rc=$r"; tail -12 "$OUT/bench_guard.log" | cut -c1-150
exit $rc

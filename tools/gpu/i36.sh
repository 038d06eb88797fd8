#!/usr/bin/env bash
# Issue 36, item 2: a fast engine's step. bench_fast_step: an 8B-Llama-shaped decode step (random bf16
# weights) replayed from a CUDA graph, alone and with the canary's HEAD and TAIL captured inside it (full
# verification, then the verify budget), bs 64 and 128 x 2048 and 4096 tokens: the canary's device time and
# its host time not hidden behind the GPU, as a share of the step, beside their floors.
set -u
timeout 280 python3 benchmarks/bench_fast_step.py --device cuda --out "$OUT/bench_fast_step.json" \
    >"$OUT/bench_fast_step.log" 2>&1
rc=$?
sed -n '/^== bench_fast_step/,$p' "$OUT/bench_fast_step.log" | cut -c1-150 | head -80
echo "bench_fast_step: rc=$rc"
exit $rc

#!/usr/bin/env bash
# Issue 36, item 1, prepare/HEAD/TAIL around the manager's graph replays: the manager's GPU graph tests (replay
# byte-identical to eager on cuda and Triton; a replayed forward dispatches only its staging copy on the host),
# the transformers GPU tests, bench_manager_graphs (HEAD and TAIL host time per decode forward, eager against
# replayed, a bucket's first use apart, torch ops per phase), then bench_transformers (two rounds; the host
# phases per step over all steps, over the steady steps, and over the steps with a bucket's first use).
# Run (about 8 minutes at most): PHASE_SECONDS=590 ./tools/gpu_session.sh i36h5
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
step tests 200 python3 -m pytest tests/manager/test_gpu_graphs.py tests/integrations/transformers/test_gpu.py \
    -o addopts="" -q -rfEs -p no:cacheprovider --durations=5
grep -E "passed|failed|error|SKIP" "$OUT/tests.log" | tail -6
step bench_manager_graphs 90 python3 benchmarks/bench_manager_graphs.py --device cuda \
    --out "$OUT/bench_manager_graphs.json"
sed -n '/^== bench_manager_graphs/,$p' "$OUT/bench_manager_graphs.log" | cut -c1-170
step bench_transformers 200 python3 benchmarks/bench_transformers.py --device cuda --rounds 2 \
    --out "$OUT/bench_transformers_cuda.json"
sed -n '/^== bench_transformers/,$p' "$OUT/bench_transformers.log" | cut -c1-190
exit $rc

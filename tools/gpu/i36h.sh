#!/usr/bin/env bash
# Issue 36, item 1, HEAD and TAIL: the manager's own CUDA graphs. The GPU tests comparing graph replay with the
# eager launches byte for byte on cuda and Triton (and the fallback, the refusal, a forward the engine itself
# captures), the demo on cuda (the graphs are on by default there), bench_manager_graphs (host time of HEAD and
# TAIL per forward, eager against replayed, beside one copy + one replay), then bench_transformers: head/tail
# host time per step with the graphs on ("manager graph replays per step" says how many phases replayed).
# Run (about 9.5 minutes at most): PHASE_SECONDS=590 ./tools/gpu_session.sh i36h
set -u
mkdir -p "$OUT"
rc=0
timeout 180 python3 -m pytest tests/manager/test_gpu_graphs.py -o addopts="" -q -rfEs -p no:cacheprovider \
    --durations=5 >"$OUT/tests.log" 2>&1
r=$?; rc=$((rc | r)); echo "manager graph tests: rc=$r"; grep -E "passed|failed|error|SKIP" "$OUT/tests.log" | tail -6
timeout 100 python3 -m kvcanary.cli demo --device cuda >"$OUT/demo.log" 2>&1
r=$?; rc=$((rc | r)); echo "demo on cuda (graphs on): rc=$r"; tail -4 "$OUT/demo.log"
timeout 90 python3 benchmarks/bench_manager_graphs.py --device cuda --out "$OUT/bench_manager_graphs.json" \
    >"$OUT/bench_manager_graphs.log" 2>&1
r=$?; rc=$((rc | r)); echo "bench_manager_graphs: rc=$r"
sed -n '/^== bench_manager_graphs/,$p' "$OUT/bench_manager_graphs.log" | cut -c1-170
timeout 200 python3 benchmarks/bench_transformers.py --device cuda --rounds 2 \
    --out "$OUT/bench_transformers_cuda.json" >"$OUT/bench_transformers.log" 2>&1
r=$?; rc=$((rc | r)); echo "bench_transformers: rc=$r"
sed -n '/^== bench_transformers/,$p' "$OUT/bench_transformers.log" | cut -c1-170
exit $rc

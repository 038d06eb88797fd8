#!/usr/bin/env bash
# Issue 23's GPU checks: two processes on the one GPU (gloo, CUDA tensors staged through the host): the
# prefill->decode transfer faults and the TP digest (tests/distributed/test_gpu_transfer.py), the fused
# Triton digest fold against the torch ops and Python, eager and captured in a CUDA graph
# (tests/distributed/test_digest.py), the cost benchmark (bench_distributed: canary per transfer and per MiB
# beside the transfer itself; the digest fold fused, fused in a graph and in torch ops, each beside its
# floor), then the demo's two-worker rows on cuda.
set -u
timeout 90 python3 -m pytest tests/distributed/test_gpu_transfer.py tests/distributed/test_digest.py -o addopts="" \
    -q -rfE -p no:cacheprovider --durations=4 >"$OUT/tests.log" 2>&1
rc=$?
echo "distributed gpu tests: rc=$rc"; grep -E "passed|failed|error|skipped" "$OUT/tests.log" | tail -3
timeout 100 python3 benchmarks/bench_distributed.py --device cuda --out "$OUT/bench_distributed.json" \
    >"$OUT/bench_distributed.log" 2>&1
rc2=$?
sed -n '/^== bench_distributed/,$p' "$OUT/bench_distributed.log" | head -20
echo "bench_distributed: rc=$rc2"
timeout 100 python3 -m kvcanary.cli demo --device cuda --fault none --workers 2 >"$OUT/demo_workers.log" 2>&1
rc3=$?
tail -12 "$OUT/demo_workers.log"
echo "demo --workers 2 on cuda: rc=$rc3"
[ $rc -eq 0 ] && [ $rc2 -eq 0 ] && [ $rc3 -eq 0 ]

#!/usr/bin/env bash
# Issue 21's GPU checks: the extension checks' parity against torch_ref on the cuda and Triton backends
# (golden vectors and fresh scenarios, on the device), their CUDA-graph capture, the default path's graph test,
# then bench_extensions (None / every flag off / on, both backends).
set -u
timeout 140 python3 -m pytest tests/gpu/test_extensions_gpu.py tests/backends/cuda/test_gpu_graph.py \
    -o addopts="" -q -rfE -p no:cacheprovider -x >"$OUT/tests.log" 2>&1
rc=$?
echo "extension + default GPU tests: rc=$rc"; grep -E "passed|failed|error|skipped" "$OUT/tests.log" | tail -3
timeout 150 python3 benchmarks/bench_extensions.py --out "$OUT/bench_extensions.json" >"$OUT/bench_extensions.log" 2>&1
rc2=$?
grep -A20 "extensions cost" "$OUT/bench_extensions.log"
echo "bench_extensions: rc=$rc2"
[ $rc -eq 0 ] && [ $rc2 -eq 0 ]

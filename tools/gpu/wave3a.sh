#!/usr/bin/env bash
# Wave 3's kernel and selection checks on the GPU: the GPU tests of both backends (parity, graphs, Triton),
# the operation object (selection, the fold as an operation, the external operation, compiled steps), the
# extension checks with the write-time owner check, compute-sanitizer memcheck over the extension checks on
# each backend, and the demo on cuda. One verdict line per step; logs in $OUT.
set -u
mkdir -p "$OUT"
rc=0
timeout 260 python3 -m pytest tests/backends/cuda/test_gpu_parity.py tests/backends/cuda/test_gpu_graph.py \
    tests/backends/triton tests/distributed/test_digest.py tests/kvcanary/test_external_operation.py \
    tests/kvcanary/test_compile_gpu.py tests/kvcanary/test_registry.py tests/kvcanary/test_priority.py \
    tests/gpu/test_extensions_gpu.py -o addopts="" -q -rfE -p no:cacheprovider --durations=5 >"$OUT/tests.log" 2>&1
r=$?; rc=$((rc | r)); echo "gpu tests: rc=$r"; grep -E "passed|failed|error" "$OUT/tests.log" | tail -3
for b in cuda triton; do
    timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
        python3 tests/gpu/sanitize.py --backend "$b" --extensions >"$OUT/memcheck_ext_$b.log" 2>&1
    r=$?; rc=$((rc | r)); echo "memcheck extensions [$b]: rc=$r"; tail -2 "$OUT/memcheck_ext_$b.log"
done
timeout 90 python3 -m kvcanary demo --device cuda >"$OUT/demo.log" 2>&1
r=$?; rc=$((rc | r)); echo "demo on cuda: rc=$r"; tail -2 "$OUT/demo.log"
exit $rc

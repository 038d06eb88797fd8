#!/usr/bin/env bash
# Issue 36, item 4: the changed kernels (Triton plan: stores masked to their row, the clamped row scan; Triton
# write: a narrow fold tile for decode-shaped writes, early second-round loads; cuda scatter: loads before the
# later-request search) on the GPU, in one run (the cuda scatter: its GPU parity tests and memcheck too):
#   1. parity: their GPU tests (both plan scans and both fold tiles forced, random, golden, large, graphs,
#      hostile values) against torch_ref;
#   2. compute-sanitizer memcheck and racecheck over tests/gpu/sanitize.py --ops plan,write (warm cache first);
#   3. benchmarks/bench_i36k.py: each kernel before and after side by side, beside its floors.
# Run through the session driver, which installs the wheels and sets PYTHONPATH:
#   PHASE_SECONDS=600 ./tools/gpu_session.sh i36k
# To drop one change after the run, revert its commit (each is one commit on branch h8; see the report).
set -u
mkdir -p "$OUT"
rc=0
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"

timeout 150 python3 -m pytest tests/backends/triton/test_plan_scan.py tests/backends/triton/test_write_fold_tile.py \
    tests/backends/triton/test_gpu.py tests/backends/triton/test_golden.py tests/backends/triton/test_large.py \
    tests/backends/triton/test_random.py tests/backends/test_hostile_gpu.py \
    -k "not (verify or VERIFY or scatter or fold-realistic or fold-hostile) and not cuda" \
    -o addopts="" -q -rfE -p no:cacheprovider >"$OUT/tests.log" 2>&1
r=$?; rc=$((rc | r))
echo "pytest triton plan/write: rc=$r"; grep -E "passed|failed|error" "$OUT/tests.log" | tail -3

timeout 60 python3 -m pytest tests/backends/cuda/test_gpu_parity.py tests/backends/test_hostile_gpu.py \
    -k "scatter and not triton" -o addopts="" -q -rfE -p no:cacheprovider >"$OUT/tests_cuda.log" 2>&1
r=$?; rc=$((rc | r))
echo "pytest cuda scatter: rc=$r"; grep -E "passed|failed|error" "$OUT/tests_cuda.log" | tail -3
for tool in memcheck racecheck; do
    timeout 45 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 3 --print-limit 20 \
        python3 tests/gpu/sanitize.py --backend cuda --quick --ops scatter_req_token_ids >"$OUT/${tool}_cuda.log" 2>&1
    r=$?; rc=$((rc | r))
    echo "$tool cuda scatter: rc=$r"; tail -2 "$OUT/${tool}_cuda.log"
done

timeout 40 python3 tests/gpu/sanitize.py --backend triton --quick --ops plan,write >"$OUT/warm.log" 2>&1
r=$?; rc=$((rc | r))
echo "sanitize.py (no sanitizer, warms Triton's cache): rc=$r"; tail -1 "$OUT/warm.log"
timeout 80 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 tests/gpu/sanitize.py --backend triton --quick --ops plan,write >"$OUT/memcheck.log" 2>&1
r=$?; rc=$((rc | r))
echo "memcheck triton plan,write: rc=$r"; tail -2 "$OUT/memcheck.log"
timeout 50 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 tests/gpu/sanitize.py --backend triton --quick --count 2 --ops plan,write >"$OUT/racecheck.log" 2>&1
r=$?; rc=$((rc | r))
echo "racecheck triton plan,write: rc=$r"; tail -2 "$OUT/racecheck.log"

timeout 110 python3 benchmarks/bench_i36k.py --out "$OUT/bench_i36k.json" >"$OUT/bench_i36k.log" 2>&1
r=$?; rc=$((rc | r))
echo "bench_i36k: rc=$r"
sed -n '/^== /,$p' "$OUT/bench_i36k.log" | cut -c1-170 | head -70
exit $rc

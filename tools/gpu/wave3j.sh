#!/usr/bin/env bash
# Wave 3, session 4, last GPU call: the GPU tests of what was merged since the first call (Triton's direct
# launches' variant check with the machine's compiler, the token pool's plan default, the quiet transformers
# step, the reused batch, the manager's quiet end_step), compute-sanitizer over the Triton kernels launched
# directly, then the figures those changes move: bench_guard (rounds paired in time), bench_transformers (the
# manager's host time, the journal's share), bench_engine before and after (its journal share), the decode
# writes beside a PARTIAL probe with its third dependent round.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 150 python3 -m pytest tests/backends/triton/test_direct_params.py tests/backends/triton/test_direct_gpu.py \
    tests/backends/triton/test_plan_pool_variants.py tests/backends/triton/test_golden.py \
    tests/integrations/transformers/test_rows_quiet.py tests/integrations/transformers/test_gpu.py \
    tests/manager/test_gpu_graphs.py tests/manager/test_batch_reuse.py tests/manager/test_pump.py \
    tests/manager/test_sweep.py tests/manager/test_quiet_step.py tests/manager/test_h2d.py ${EXTRA_TESTS:-} \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=5
step bench_guard 60 python3 benchmarks/bench_guard.py --device cuda --out "$OUT/bench_guard_cuda.json"
grep -E "isolate|A/A" "$OUT/bench_guard.log" | tail -4 | cut -c1-230
BUDGET=500 BENCHES="bench_engine" OUT="$OUT/pairs" bash tools/gpu/suite.sh
grep -iE "journal" "$OUT/pairs/after/bench_engine.log" | cut -c1-200 | tail -6
step bench_transformers 120 python3 benchmarks/bench_transformers.py --device cuda --rounds 1 \
    --out "$OUT/bench_transformers_cuda.json"
grep -E "steady|journal_share" "$OUT/bench_transformers.log" | tail -9 | cut -c1-160
step bench_decode_write 60 python3 benchmarks/bench_decode_write.py --out "$OUT/bench_decode_write.json"
grep -E "probe|/ the probe" "$OUT/bench_decode_write.log" | cut -c1-150 | tail -24
step memcheck_triton 80 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 tests/gpu/sanitize.py --backend triton --quick --ops plan,write,verify,scatter_req_token_ids
step racecheck_triton 60 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 tests/gpu/sanitize.py --backend triton --quick --count 2 --ops plan,write
exit $rc

#!/usr/bin/env bash
# Wave 3, session 6, one GPU call for everything (device time is short): the GPU tests of what this session changed
# (pinned inputs copied by the staged HEAD graph, the read-back copied by the TAIL graph, one staging cat, the
# engine-captured budgeted forward, the verify budget's kernels after the garbage-offset fix) and the transformers
# integration on cuda; memcheck over the budget kernels; then the figures: bench_transformers (the manager's host
# time), bench_fast_step's bs 64 x 2048 case (the budgeted forward), bench_write_variants (the
# cuda write's candidate kernels beside their probes; it fails if a variant stores other bytes than the default).
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests_manager 120 python3 -m pytest tests/manager/test_gpu_graphs.py tests/manager/test_batch_reuse.py \
    tests/manager/test_pump.py tests/manager/test_quiet_step.py tests/manager/test_stats.py \
    tests/manager/test_capture_safety.py tests/manager/test_pinned.py tests/manager/test_tail_readback.py \
    tests/manager/test_budget.py tests/manager/test_gpu_engine_capture.py tests/manager/test_unbucketed_staging.py \
    tests/benchmarks/test_budget_nodes.py tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=3
KVCANARY_BACKEND=cuda step tf_gpu_cuda 45 python3 -m pytest tests/integrations/transformers/test_gpu.py \
    -o addopts="" -q -rfE -p no:cacheprovider
step memcheck_budget 45 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py -o addopts="" -q \
    -p no:cacheprovider -x
step bench_transformers 100 python3 benchmarks/bench_transformers.py --device cuda --rounds 1 \
    --out "$OUT/bench_transformers_cuda.json"
grep -E "steady" "$OUT/bench_transformers.log" | tail -6 | cut -c1-160
step bench_fast_step 60 python3 benchmarks/bench_fast_step.py --device cuda --quick --out "$OUT/bench_fast_step.json"
sed -n '/^== bench_fast_step/,$p' "$OUT/bench_fast_step.log" | grep -E "canary device (time|share of the step,)|alone|host" \
    | cut -c1-150
step bench_write_variants 60 python3 benchmarks/bench_write_variants.py --variants 0,1,3,7 --out "$OUT/bench_write_variants.json"
sed -n '/^== /,$p' "$OUT/bench_write_variants.log" | cut -c1-170 | head -70
exit $rc

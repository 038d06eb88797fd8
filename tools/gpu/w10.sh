#!/usr/bin/env bash
# Wave 3, session 10's GPU call when only one comes: the GPU tests of V's fork under capture and Triton's write
# variants (and of the session's merges), the budgeted forward with and without the fork (budget_nodes,
# bench_fast_step --quick: issue 36 item 2), Triton's decode write with its variants beside cuda's (item 4), then
# compute-sanitizer memcheck over Triton's write with every variant bit on, for what the call has left.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 230 python3 -m pytest tests/manager/test_gpu_v_branch.py tests/manager/test_gpu_graphs.py \
    tests/manager/test_gpu_engine_capture.py tests/manager/test_budget.py tests/manager/test_pump.py \
    tests/manager/test_tail_readback.py tests/manager/test_graphs.py tests/manager/test_batch_reuse.py \
    tests/manager/test_pinned.py tests/manager/test_v_branch.py tests/manager/test_capture_safety.py \
    tests/integrations/transformers/test_gpu.py tests/backends/cuda/test_write_variant_rule.py \
    tests/backends/cuda/test_write_variants.py tests/backends/triton/test_write_variants.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=5
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -12
step budget_nodes 100 python3 benchmarks/budget_nodes.py --out "$OUT/budget_nodes.json"
grep -E "^(all|K only|V on)|sequential|forked" "$OUT/budget_nodes.log" | cut -c1-170 | head -12
step bench_fast_step 70 python3 benchmarks/bench_fast_step.py --device cuda --quick --out "$OUT/bench_fast_step.json"
grep -E "canary device|alone|host|share" "$OUT/bench_fast_step.log" | cut -c1-170 | head -14
step bench_decode_write 90 python3 benchmarks/bench_decode_write.py --write-variants 1,3,7 \
    --out "$OUT/bench_decode_write.json"
grep -E "triton / cuda|variant . / cuda" "$OUT/bench_decode_write.log" | cut -c1-120 | head -40
left=$(( ${W10_SECONDS:-520} - SECONDS ))
if [ "$left" -gt 30 ]; then
    step memcheck_triton_v7 "$left" compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
        --print-limit 20 python3 -c "import runpy, sys; from kvcanary_backends.triton._jit import TUNING; \
TUNING['write_variant'] = 7; sys.argv = ['sanitize.py', '--backend', 'triton', '--quick', '--ops', 'write']; \
runpy.run_path('tests/gpu/sanitize.py', run_name='__main__')"
fi
exit $rc

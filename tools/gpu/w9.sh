#!/usr/bin/env bash
# Wave 3, session 9's GPU call, in priority order so that a call cut short keeps the first steps: the GPU tests of
# the session's changes (V's launches on a side stream under capture, the cuda write's variant per launch shape,
# the verify budget's empty batch stated once), the budgeted forward (bench_fast_step --quick, budget_nodes: issue
# 36 item 2), Triton's decode write beside cuda's with its variants (item 4), then before/after pairs against the session's first commit ($BEFORE_TGZ; default bench_fast_step)
# for as long as the call has left.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 240 python3 -m pytest tests/manager/test_gpu_v_branch.py tests/manager/test_gpu_graphs.py \
    tests/manager/test_gpu_engine_capture.py tests/manager/test_budget.py tests/manager/test_pump.py \
    tests/manager/test_tail_readback.py tests/manager/test_graphs.py tests/manager/test_batch_reuse.py \
    tests/manager/test_pinned.py tests/manager/test_v_branch.py tests/integrations/transformers/test_gpu.py \
    tests/backends/cuda/test_write_variant_rule.py tests/backends/cuda/test_write_variants.py \
    tests/backends/cuda/test_budget.py tests/backends/cuda/test_gpu_graph.py tests/backends/triton/test_write_variants.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=5
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -12
step bench_fast_step 70 python3 benchmarks/bench_fast_step.py --device cuda --quick --out "$OUT/bench_fast_step.json"
grep -E "canary device|alone|host|share" "$OUT/bench_fast_step.log" | cut -c1-170 | head -14
step bench_decode_write 90 python3 benchmarks/bench_decode_write.py --write-variants 1,3,7 \
    --out "$OUT/bench_decode_write.json"
grep -E "triton / cuda|variant . / cuda" "$OUT/bench_decode_write.log" | cut -c1-120 | head -40
step budget_nodes 100 python3 benchmarks/budget_nodes.py --out "$OUT/budget_nodes.json"
grep -E "^(all|K only|V on)|sequential|forked" "$OUT/budget_nodes.log" | cut -c1-170 | head -12
BUDGET=$(( ${W9_SECONDS:-560} - SECONDS )) BENCHES="${W9_BENCHES:-bench_fast_step}" \
    OUT="$OUT/suite" bash "$(dirname "$0")/suite.sh"
exit $rc

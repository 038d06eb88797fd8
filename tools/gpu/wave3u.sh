#!/usr/bin/env bash
# Wave 3, session 7, first GPU call: the manager tests that failed in wave3x with their files; the verify budget's
# overflow count (cuda, Triton, manager) and Triton's decode write with the chain fold against torch_ref;
# compute-sanitizer memcheck over both; bench_transformers (the manager's host time per step),
# bench_decode_write --fold-programs (the chain fold beside the two-program layout and cuda),
# bench_fast_step --quick (the budgeted forward), racecheck over Triton's write, budget_nodes: in that order, so
# a call cut short keeps the first. About 520 s.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 110 python3 -m pytest tests/manager/test_gpu_graphs.py tests/manager/test_pinned.py \
    tests/manager/test_tail_readback.py tests/manager/test_graphs.py tests/manager/test_budget.py \
    tests/manager/test_gpu_engine_capture.py tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py \
    tests/backends/triton/test_write_chain_fold.py tests/backends/triton/test_write_chain_fold_review.py \
    tests/backends/triton/test_write_fold_tile.py tests/manager/test_pump.py tests/manager/test_batch_reuse.py \
    tests/integrations/transformers/test_rows_quiet.py -o addopts="" -q -rfE -p no:cacheprovider --durations=3
grep -E "^FAILED" "$OUT/tests.log" | head -8
step memcheck 70 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py \
    tests/backends/triton/test_write_chain_fold.py -o addopts="" -q -p no:cacheprovider -x
step bench_transformers 90 python3 benchmarks/bench_transformers.py --device cuda --rounds 1 \
    --out "$OUT/bench_transformers_cuda.json"
grep -E "steady" "$OUT/bench_transformers.log" | tail -6 | cut -c1-160
step bench_decode_write 80 python3 benchmarks/bench_decode_write.py --fold-programs \
    --out "$OUT/bench_decode_write.json"
sed -n '/^== /,$p' "$OUT/bench_decode_write.log" | grep -E "triton|probe|==" | cut -c1-170 | head -60
step bench_fast_step 60 python3 benchmarks/bench_fast_step.py --device cuda --quick --out "$OUT/bench_fast_step.json"
sed -n '/^== bench_fast_step/,$p' "$OUT/bench_fast_step.log" | grep -E "canary device (time|share of the step,)|alone|host" \
    | cut -c1-150
step racecheck_triton_write 45 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 tests/gpu/sanitize.py --backend triton --quick --count 2 --ops write
step budget_nodes 50 python3 benchmarks/budget_nodes.py --device cuda --out "$OUT/budget_nodes.json"
sed -n '/^== /,$p' "$OUT/budget_nodes.log" | cut -c1-170 | head -40
exit $rc

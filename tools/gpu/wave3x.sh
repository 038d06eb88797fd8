#!/usr/bin/env bash
# Wave 3, session 6, the one short GPU call the device time allowed: the GPU tests of the manager's changes (pinned
# inputs copied by the staged HEAD graph, the read-back copied by the TAIL graph and the fold's waits, one staging
# cat, the engine-captured budgeted forward) and of the verify budget's kernels after the garbage-offset fix;
# bench_transformers (the manager's host time per step); memcheck over the budget kernels. About 240 s.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 100 python3 -m pytest tests/manager/test_gpu_graphs.py tests/manager/test_pinned.py \
    tests/manager/test_tail_readback.py tests/manager/test_gpu_engine_capture.py tests/manager/test_batch_reuse.py \
    tests/manager/test_pump.py tests/manager/test_quiet_step.py tests/backends/cuda/test_budget.py \
    tests/backends/triton/test_budget.py -o addopts="" -q -rfE -p no:cacheprovider --durations=3
step bench_transformers 100 python3 benchmarks/bench_transformers.py --device cuda --rounds 1 \
    --out "$OUT/bench_transformers_cuda.json"
grep -E "steady" "$OUT/bench_transformers.log" | tail -6 | cut -c1-160
step memcheck_budget 40 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py -o addopts="" -q \
    -p no:cacheprovider -x
exit $rc

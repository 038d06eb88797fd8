#!/usr/bin/env bash
# Issue 36, item 2: verify_budget's optional overflow counter (skipped_verifies += 1 - enable, one thread), so a
# budgeted forward's TAIL launches no count of its own. On the GPU: the cuda and Triton kernels against torch_ref
# (counter given or not, enable 0 and 1, empty batches), under compute-sanitizer memcheck and racecheck; the
# manager's budget, graph and capture tests; the launches and nodes of the budgeted forward; its step cost.
# Run through the session driver, which installs the wheels and sets PYTHONPATH:
#   PHASE_SECONDS=600 ./tools/gpu_session.sh i36s
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
step tests 90 python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py \
    tests/manager/test_budget.py tests/manager/test_gpu_graphs.py tests/manager/test_capture_safety.py \
    tests/benchmarks/test_budget_launches.py tests/benchmarks/test_budget_nodes.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=3
step memcheck 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py -o addopts="" -q \
    -p no:cacheprovider -x
step racecheck_cuda 40 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 -m pytest tests/backends/cuda/test_budget.py -o addopts="" -q -p no:cacheprovider -x -k gpu
step racecheck_triton 60 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 -m pytest tests/backends/triton/test_budget.py -o addopts="" -q -p no:cacheprovider -x \
    -k "triton and not garbage"
step budget_launches 30 python3 benchmarks/budget_launches.py --device cuda
tail -7 "$OUT/budget_launches.log" | cut -c1-150
step budget_nodes 150 python3 benchmarks/budget_nodes.py --device cuda --out "$OUT/budget_nodes.json"
grep -E "^  |all:" "$OUT/budget_nodes.log" | cut -c1-170 | head -12
step fast_step 150 python3 benchmarks/bench_fast_step.py --quick --out "$OUT/fast_step.json"
tail -12 "$OUT/fast_step.log" | cut -c1-170
exit $rc

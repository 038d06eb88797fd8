#!/usr/bin/env bash
# Wave 3, session 5, last GPU call: the verify budget's new one-launch filter (verify_budget: cuda and Triton
# kernels against torch_ref on the GPU, under compute-sanitizer memcheck, the cuda kernel's block sum under racecheck; the launches a budgeted
# forward makes) and the manager's graphs after the merges.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 60 python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py \
    tests/manager/test_gpu_graphs.py tests/manager/test_capture_safety.py tests/manager/test_budget.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=3
step memcheck 50 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py -o addopts="" -q \
    -p no:cacheprovider -x
step budget_launches 20 python3 benchmarks/budget_launches.py --device cuda
tail -6 "$OUT/budget_launches.log" | cut -c1-150
step racecheck 35 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 -m pytest tests/backends/cuda/test_budget.py -o addopts="" -q -p no:cacheprovider -x -k gpu
exit $rc

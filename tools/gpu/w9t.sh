#!/usr/bin/env bash
# Wave 3, session 9's short GPU call (little device time left): the GPU tests of the session's changes only: V's
# launches forked under capture (turned on by the tests), the cuda write's variant per launch shape, every bit of
# Triton's write variants against torch_ref, the manager's graphs.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
step tests "${W9T_SECONDS:-170}" python3 -m pytest tests/manager/test_gpu_v_branch.py \
    tests/backends/cuda/test_write_variant_rule.py tests/backends/triton/test_write_variants.py \
    tests/manager/test_gpu_graphs.py -o addopts="" -q -rfE -p no:cacheprovider --durations=5
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | head -14
exit $rc

#!/usr/bin/env bash
# Wave 3, session 10's shortest GPU call (for a few minutes of device time): the GPU tests of V's fork under
# capture and of Triton's write variants, then budget_nodes (the budgeted HEAD + TAIL graph forked and
# sequential: issue 36 item 2) for what the call has left.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
step tests 150 python3 -m pytest tests/manager/test_gpu_v_branch.py tests/backends/triton/test_write_variants.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=5
grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -12
step budget_nodes $(( ${W10_SECONDS:-240} - SECONDS )) python3 benchmarks/budget_nodes.py --out "$OUT/budget_nodes.json"
grep -E "^(all|K only|V on)|sequential|forked" "$OUT/budget_nodes.log" | cut -c1-170 | head -12
exit $rc

#!/usr/bin/env bash
# Wave 3, session 11's second GPU call: the first failure of V's fork tests in full (session 11's first call saw
# all eight captured cases fail), Triton's write variants' GPU parity, Triton's write tests with the tree's
# default variant, racecheck over Triton's write, then the manager's other GPU tests for what the call has left.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc, step and manager_gpu
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
python3 -c "from kvcanary_backends.triton._jit import TUNING; print('write_variant', TUNING['write_variant'])"
step v_branch 110 python3 -m pytest tests/manager/test_gpu_v_branch.py -x -o addopts="" -q --tb=short -p no:cacheprovider
grep -vE "^\s*$" "$OUT/v_branch.log" | tail -45 | cut -c1-220
step variants 150 python3 -m pytest tests/backends/triton/test_write_variants.py -o addopts="" -q -rfE -p no:cacheprovider
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/variants.log" | head -8
step triton_write 120 python3 -m pytest tests/backends/triton/test_golden.py tests/backends/triton/test_random.py \
    tests/backends/triton/test_gpu.py -k write -o addopts="" -q -rfE -p no:cacheprovider
grep -E "^(FAILED|ERROR)" "$OUT/triton_write.log" | head -8
step racecheck_write 60 compute-sanitizer --tool racecheck --error-exitcode 3 --print-limit 20 \
    python3 tests/gpu/sanitize.py --backend triton --quick --ops write
left=$(( ${W11_SECONDS:-520} - SECONDS ))
if [ "$left" -gt 30 ]; then
    manager_gpu "$left"
fi
exit $rc

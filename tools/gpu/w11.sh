#!/usr/bin/env bash
# Wave 3, session 11's second GPU call: the first failure of V's fork tests in full (session 11's first call saw
# all eight captured cases fail), Triton's write variants' GPU parity, Triton's write tests with the tree's
# default variant, racecheck over Triton's write, then the manager's other GPU tests for what the call has left.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
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
    step manager_gpu "$left" python3 -m pytest tests/manager/test_gpu_graphs.py tests/manager/test_gpu_engine_capture.py \
        tests/manager/test_batch_reuse.py tests/manager/test_pinned.py tests/manager/test_pump.py \
        tests/manager/test_tail_readback.py tests/manager/test_budget.py tests/manager/test_graphs.py \
        tests/manager/test_capture_safety.py tests/integrations/transformers/test_gpu.py \
        -o addopts="" -q -rfE -p no:cacheprovider
    grep -E "^(FAILED|ERROR)" "$OUT/manager_gpu.log" | head -12
fi
exit $rc

#!/usr/bin/env bash
# Wave 3, session 5, first GPU call: the GPU tests of session 4's late changes (the transformers integration with
# the isolate policy, the manager's graphs and its replayed sweep, the quiet end_step, the Triton direct path on
# the cuda backend's LaunchConfig cache, the cuda backend's own launches through that cache), then where each
# host phase of the transformers integration spends its time (benchmarks/profile_phases.py).
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 250 python3 -m pytest tests/integrations/transformers/test_gpu.py tests/manager/test_gpu_graphs.py \
    tests/manager/test_batch_reuse.py tests/manager/test_pump.py tests/manager/test_sweep.py \
    tests/manager/test_quiet_step.py tests/manager/test_h2d.py tests/backends/triton/test_direct_gpu.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=5
step cuda_tests 100 python3 -m pytest tests/backends/cuda/test_gpu_graph.py tests/backends/cuda/test_gpu_parity.py \
    -o addopts="" -q -rfE -p no:cacheprovider -x
step profile ${PROFILE_SECS:-170} python3 benchmarks/profile_phases.py --top 22
grep -A12 "== torch.profiler: map\|== cProfile: map" "$OUT/profile.log" | cut -c1-150 | head -30
exit $rc

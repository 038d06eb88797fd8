#!/usr/bin/env bash
# Wave 3, session 4, first GPU call: the GPU tests of what was merged after the last GPU run (transformers' ids
# widened once and its batch reused, the transformers guard's feed, the demo guard's feed), the served canary on
# cuda, then the figures those changes move: the isolate policy's overhead (bench_guard), the manager's host
# time and the journal's share inside transformers (bench_transformers),
# Triton's compiled variants launched through cuda.core: their GPU tests and host_launch. The demo engine's
# pairs, the manager's replays alone and a profile: wave3i.sh.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 150 python3 -m pytest tests/integrations/transformers/test_gpu.py tests/manager/test_gpu_graphs.py \
    tests/gpu/test_owner_map_gpu.py -o addopts="" -q -rfE -p no:cacheprovider --durations=5
KVCANARY_BACKEND=cuda step serve 40 python3 -m pytest tests/integrations/transformers/test_serve.py -o addopts="" \
    -q -rfE -p no:cacheprovider
step bench_guard 60 python3 benchmarks/bench_guard.py --device cuda --out "$OUT/bench_guard_cuda.json"
tail -12 "$OUT/bench_guard.log" | cut -c1-160
step bench_transformers 130 python3 benchmarks/bench_transformers.py --device cuda --rounds 1 \
    --out "$OUT/bench_transformers_cuda.json"
grep -iE "host|journal|share|steady|map|head|tail|end_step" "$OUT/bench_transformers.log" | cut -c1-160 | tail -30
step triton_direct 120 python3 -m pytest tests/backends/triton/test_direct_params.py \
    tests/backends/triton/test_direct_gpu.py tests/backends/triton/test_gpu.py tests/backends/test_replay_gpu.py \
    tests/backends/triton/test_launch.py -o addopts="" -q -rfE -p no:cacheprovider --durations=5
step host_launch 60 python3 benchmarks/host_launch.py --out "$OUT/host_launch.json"
grep -E "triton|bare|cuda" "$OUT/host_launch.log" | cut -c1-170 | tail -30
exit $rc

#!/usr/bin/env bash
# Wave 3, session 6 (issue 36 item 1): the map's staging copy as a memcpy node of the kept batch's staged HEAD
# graph (pinned inputs, double-buffered) and the read-back copy as a memcpy node at the end of the TAIL graph.
# The GPU tests of the manager's graphs, pump, quiet step, batch reuse, stats, capture safety, the pinned inputs
# and the TAIL read-back, and the transformers integration with each GPU backend forced; then the figures:
# bench_transformers (the manager's host time per step), the CUDA calls per phase (torch.profiler over a few
# steady steps) and each phase timed as the engine's launch queue leaves it and after a device sync. <= 500 s.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 130 python3 -m pytest tests/manager/test_gpu_graphs.py tests/manager/test_batch_reuse.py \
    tests/manager/test_pump.py tests/manager/test_quiet_step.py tests/manager/test_stats.py \
    tests/manager/test_capture_safety.py tests/manager/test_pinned.py tests/manager/test_tail_readback.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=3
for b in triton cuda; do
    KVCANARY_BACKEND=$b step "tf_gpu_$b" 60 python3 -m pytest tests/integrations/transformers/test_gpu.py \
        -o addopts="" -q -rfE -p no:cacheprovider
done
step bench_transformers 100 python3 benchmarks/bench_transformers.py --device cuda --rounds 1 \
    --out "$OUT/bench_transformers_cuda.json"
grep -E "steady" "$OUT/bench_transformers.log" | tail -6 | cut -c1-160
step profile 55 python3 benchmarks/profile_phases.py --profilers torch --new-tokens 48 --first 24 --count 16
grep -E "^== torch.profiler|cuda[A-Z][A-Za-z]+|aten::" "$OUT/profile.log" | head -24 | cut -c1-110
step drain ${DRAIN_SECS:-95} python3 benchmarks/profile_phases.py --drain-rounds 2 --profilers none --new-tokens 80 \
    --first 30 --count 44
grep -A6 "median host time" "$OUT/drain.log"
exit $rc

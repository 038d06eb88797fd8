#!/usr/bin/env bash
# Wave 3, session 5: the GPU tests of the manager's quieter step (one capture check per forward, a kept batch's
# HEAD replayed with its staging copy inside, the pump's event on the stream it ran on) and the transformers
# integration with each GPU backend forced (the isolate policy among them); then the figures: bench_transformers
# (the manager's host time per step) and each phase timed as the engine's launch queue leaves it and after a
# device sync (benchmarks/profile_phases.py).
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 150 python3 -m pytest tests/manager/test_gpu_graphs.py tests/manager/test_batch_reuse.py \
    tests/manager/test_pump.py tests/manager/test_quiet_step.py tests/manager/test_stats.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=3
for b in triton cuda; do
    KVCANARY_BACKEND=$b step "tf_gpu_$b" 80 python3 -m pytest tests/integrations/transformers/test_gpu.py \
        -o addopts="" -q -rfE -p no:cacheprovider
done
step bench_transformers 120 python3 benchmarks/bench_transformers.py --device cuda --rounds 1 \
    --out "$OUT/bench_transformers_cuda.json"
grep -E "steady" "$OUT/bench_transformers.log" | tail -6 | cut -c1-160
step drain ${DRAIN_SECS:-150} python3 benchmarks/profile_phases.py --drain-rounds 2 --profilers none --new-tokens 80 \
    --first 30 --count 44
grep -A6 "median host time" "$OUT/drain.log"
exit $rc

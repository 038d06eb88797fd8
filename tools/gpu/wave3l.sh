#!/usr/bin/env bash
# Wave 3, session 5, second GPU call: the transformers integration's GPU tests (the isolate policy among them)
# with each GPU backend forced, and how much of each host phase's time is the canary's own: each phase timed as
# the engine's launch queue leaves it and after a device sync, alternating runs (benchmarks/profile_phases.py).
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
for b in triton cuda; do
    KVCANARY_BACKEND=$b step "tf_gpu_$b" 90 python3 -m pytest tests/integrations/transformers/test_gpu.py \
        -o addopts="" -q -rfE -p no:cacheprovider
done
step drain 300 python3 benchmarks/profile_phases.py --drain-rounds 3 --profilers none --new-tokens 96 --first 30 \
    --count 60
grep -A6 "median host time" "$OUT/drain.log"
exit $rc

#!/usr/bin/env bash
# Wave 3, session 7, second GPU call: the hostile decode-write review test on the device's tile (it sampled more
# slots than its pool held there), the cuda write's candidate kernels side by side beside their probes (the
# benchmark fails if a variant stores other bytes than the default), and where the transformers integration's host
# phases spend their time (each phase drained and after a sync). About 220 s.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch; print(torch.cuda.get_device_name(), torch.__version__)"
step tests 60 python3 -m pytest tests/backends/triton/test_write_chain_fold_review.py -o addopts="" -q -rfE \
    -p no:cacheprovider
grep -E "^FAILED" "$OUT/tests.log" | head -5
step bench_write_variants 70 python3 benchmarks/bench_write_variants.py --out "$OUT/bench_write_variants.json"
sed -n '/^== /,$p' "$OUT/bench_write_variants.log" | cut -c1-150 | grep -E "==|probe|variant|PARTIAL" | head -60
step drain 110 python3 benchmarks/profile_phases.py --drain-rounds 2 --profilers none --new-tokens 64 --first 24 \
    --count 36
grep -A7 "median host time" "$OUT/drain.log"
exit $rc

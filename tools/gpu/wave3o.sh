#!/usr/bin/env bash
# Wave 3, session 6, first GPU call: what session 5 left unchecked on the GPU (the verify_budget kernels after
# the garbage-offset fix: parity with torch_ref, nothing written outside the outputs, memcheck and racecheck; the
# manager's graph tests after their refactor) and this session's before figures: bench_engine (the journal's
# share after the one-event-per-block feed), bench_fast_step (all four cases), the PARTIAL decode writes and
# the scatter beside their probes.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 90 python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py \
    tests/manager/test_gpu_graphs.py tests/manager/test_capture_safety.py tests/manager/test_budget.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=3
step memcheck 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py -o addopts="" -q \
    -p no:cacheprovider -x
step racecheck 40 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 -m pytest tests/backends/cuda/test_budget.py -o addopts="" -q -p no:cacheprovider -x -k gpu
step bench_engine 110 python3 benchmarks/bench_engine.py --device cuda --out "$OUT/bench_engine.json"
grep -iE "journal|engine_step|canary" "$OUT/bench_engine.log" | tail -12 | cut -c1-170
step bench_fast_step ${FAST_SECS:-200} python3 benchmarks/bench_fast_step.py --device cuda --out "$OUT/bench_fast_step.json"
grep -E "share of the step|device time" "$OUT/bench_fast_step.log" | tail -24 | cut -c1-170
step bench_decode_write 80 python3 benchmarks/bench_decode_write.py --out "$OUT/bench_decode_write.json"
grep -E "probe|/ cuda" "$OUT/bench_decode_write.log" | tail -30 | cut -c1-170
exit $rc

#!/usr/bin/env bash
# Wave 3, session 8's GPU call, in priority order so that a call cut short keeps the first steps: bench_engine
# (the slot journal's share of the managers' host time, issue 35), bench_transformers (the manager's host time per
# step, issue 36 item 1), the manager's and the transformers integration's GPU tests after the host-path changes,
# then issue 36's "nothing slower" pairs (tools/gpu/suite.sh) for as long as the call has left.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step bench_engine 80 python3 benchmarks/bench_engine.py --out "$OUT/bench_engine.json"
grep -E "journal|canary host|engine_step" "$OUT/bench_engine.log" | tail -9 | cut -c1-170
step bench_transformers 110 python3 benchmarks/bench_transformers.py --device cuda --rounds 1 \
    --out "$OUT/bench_transformers_cuda.json"
grep -E "steady|journal_share|canary_share" "$OUT/bench_transformers.log" | tail -8 | cut -c1-170
step tests 120 python3 -m pytest tests/manager/test_gpu_graphs.py tests/manager/test_pinned.py \
    tests/manager/test_tail_readback.py tests/manager/test_graphs.py tests/manager/test_budget.py \
    tests/manager/test_gpu_engine_capture.py tests/manager/test_pump.py tests/manager/test_batch_reuse.py \
    tests/integrations/transformers/test_rows_quiet.py tests/integrations/transformers/test_gpu.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=3
grep -E "^FAILED" "$OUT/tests.log" | head -8
BUDGET=$(( ${W8_SECONDS:-560} - SECONDS )) BENCHES="${W8_BENCHES:-host_launch bench_decode_write bench_cuda bench_compile bench_backends}" \
    OUT="$OUT/suite" bash "$(dirname "$0")/suite.sh"
exit $rc

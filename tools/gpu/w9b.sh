#!/usr/bin/env bash
# Wave 3, session 9's second GPU call: the GPU tests of Triton's write (parity with torch_ref, graphs) and
# compute-sanitizer over it when it changed ($W9B_TRITON=1), bench_engine (the journal's share, issue 35), then
# before/after pairs against the session's first commit ($BEFORE_TGZ) for as long as the call has left:
# bench_decode_write (Triton / cuda, issue 36 item 4), bench_cuda (the write's variant per launch shape), host_launch.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
if [ "${W9B_TRITON:-0}" = 1 ]; then
    step triton_tests 150 python3 -m pytest tests/backends/triton -k "write or fold or chain" \
        -o addopts="" -q -rfE -p no:cacheprovider --durations=3 -x
    grep -E "^(FAILED|ERROR)" "$OUT/triton_tests.log" | head -8
    step memcheck_triton 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
        --print-limit 20 python3 tests/gpu/sanitize.py --backend triton --quick
    step racecheck_triton 120 compute-sanitizer --tool racecheck --error-exitcode 3 --print-limit 20 \
        python3 tests/gpu/sanitize.py --backend triton --quick --ops write
fi
step bench_engine 80 python3 benchmarks/bench_engine.py --out "$OUT/bench_engine.json"
grep -E "journal|canary host" "$OUT/bench_engine.log" | tail -7 | cut -c1-150
BUDGET=$(( ${W9_SECONDS:-560} - SECONDS )) BENCHES="${W9_BENCHES:-bench_decode_write bench_cuda host_launch}" \
    OUT="$OUT/suite" bash "$(dirname "$0")/suite.sh"
exit $rc

#!/usr/bin/env bash
# Wave 3, session 8's second GPU call: the slot journal beside the journal it replaced on this host
# (tools/gpu/journal_pair.py), then issue 36's "nothing slower" pairs left from the first call (tools/gpu/w8.sh ran
# host_launch, bench_decode_write, bench_cuda and bench_backends), the host-time benchmarks first (their "after"
# rows are this tree's journal and manager figures too), in priority order within $W8_SECONDS.
set -u
mkdir -p "$OUT"
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
timeout 60 python3 tools/gpu/journal_pair.py 64 2>&1 | tee "$OUT/journal_pair.log"
BUDGET=$(( ${W8_SECONDS:-520} - SECONDS )) BENCHES="${W8_BENCHES:-bench_engine bench_transformers bench_compile bench_triton}" \
    OUT="$OUT/suite" bash "$(dirname "$0")/suite.sh"
grep -hE "journal_share|journal per decode|canary host time" "$OUT/suite/after/bench_engine.log" 2>/dev/null | head -4 | cut -c1-150
grep -hE "canary phases per step, steady" "$OUT"/suite/*/bench_transformers.log 2>/dev/null | cut -c1-150

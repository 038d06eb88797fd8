#!/usr/bin/env bash
# Wave 3, session 3, second GPU call: the GPU tests wave3f's bound cut off (the prepared launches' replays,
# the pump, the external operation, selection, the fold, hostile input), then issue 36's "nothing slower"
# pairs, before and after on this machine (tools/gpu/suite.sh), as many as fit.
set -u
mkdir -p "$OUT"
t0=$SECONDS
timeout 130 python3 -m pytest tests/backends/test_replay_gpu.py tests/manager/test_pump.py \
    tests/kvcanary/test_external_operation.py tests/kvcanary/test_registry.py tests/kvcanary/test_priority.py \
    tests/distributed/test_digest.py tests/backends/test_hostile_gpu.py -o addopts="" -q -rfE -p no:cacheprovider \
    --durations=5 >"$OUT/tests.log" 2>&1
echo "tests: rc=$? in $((SECONDS - t0)) s  $(grep -E '[0-9]+ (passed|failed)' "$OUT/tests.log" | tail -1)"
BUDGET=$((520 - SECONDS)) OUT="$OUT" bash tools/gpu/suite.sh

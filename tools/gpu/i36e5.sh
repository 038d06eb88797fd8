#!/usr/bin/env bash
# Issue 36, item 5: the demo engine's step +37 % after round 4 on a GPU. tools/gpu/engine_split.py in the before
# tree (.gpucache/before.tgz, unpacked as tools/gpu/suite.sh does) and in this tree, back to back on one machine:
# the engine without the canary alone, beside one and two canary engines, with the machine's torch threads and
# with one, and the CUDA runtime calls of one step. About 3 minutes (at most 9).
# Run: OUT=... bash tools/gpu/i36e5.sh   (or PHASE_SECONDS=560 ./tools/gpu_session.sh i36e5)
set -u
AFTER=$PWD
mkdir -p "$OUT" /tmp/before
if [ ! -f /tmp/before/pyproject.toml ]; then
    tar -xzf .gpucache/before.tgz -C /tmp/before || exit 1
    (cd /tmp/before && PYTHONPATH=/tmp/site python3 -m pip install -q --no-index --no-deps --no-build-isolation \
        --no-compile --target /tmp/kvc-before . >/dev/null 2>&1) || echo "warning: before tree's entry points"
fi
rc=0
(cd /tmp/before && PYTHONPATH=/tmp/site:/tmp/before:/tmp/kvc-before timeout 270 python3 "$AFTER/tools/gpu/engine_split.py" \
    >"$OUT/engine_split_before.log" 2>&1) || rc=1
timeout 270 python3 tools/gpu/engine_split.py >"$OUT/engine_split_after.log" 2>&1 || rc=1
grep -v "^USDT\|^STAGE:" "$OUT/engine_split_before.log" "$OUT/engine_split_after.log" | cut -c1-400
exit $rc

#!/usr/bin/env bash
# Wave 3, session 6: the GPU tests that failed in wave3x, after their fixes (graphs dropped while the engine
# captures are destroyed after its capture; the two-forwards test without the kernel-run watchdog), with the rest
# of their files. About 40 s.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
step tests 60 python3 -m pytest tests/manager/test_gpu_graphs.py tests/manager/test_pinned.py \
    tests/manager/test_tail_readback.py tests/manager/test_graphs.py -o addopts="" -q -rfE -p no:cacheprovider
grep -E "^FAILED|passed|failed" "$OUT/tests.log" | tail -5
exit $rc

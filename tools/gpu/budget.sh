#!/usr/bin/env bash
# The verification budget on the GPU: its tests on the device backends, then bench_budget (step cost and
# worst-case detection latency beside full verification).
set -u
timeout 100 python3 -m pytest tests/manager/test_budget.py -o addopts="" -q -p no:cacheprovider >"$OUT/tests.log" 2>&1
echo "budget tests (cpu world): rc=$?"; tail -1 "$OUT/tests.log"
timeout 180 python3 benchmarks/bench_budget.py --out "$OUT/bench_budget.json" >"$OUT/bench_budget.log" 2>&1
rc=$?
tail -14 "$OUT/bench_budget.log"
echo "bench_budget: rc=$rc"
exit $rc

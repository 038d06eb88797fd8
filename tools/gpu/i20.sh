#!/usr/bin/env bash
# Issue 20's GPU checks: torch.compile with both GPU backends (opcheck over golden and random calls, compiled
# steps against eager, 100 steps under mode="reduce-overhead"), the manager compiled, then bench_compile.
set -u
timeout 240 python3 -m pytest tests/kvcanary/test_compile_gpu.py tests/manager/test_compile.py -o addopts="" -q -rfE \
    -p no:cacheprovider -x >"$OUT/tests.log" 2>&1
rc=$?
echo "compile tests (gpu): rc=$rc"; tail -3 "$OUT/tests.log"
timeout 150 python3 benchmarks/bench_compile.py --out "$OUT/bench_compile.json" >"$OUT/bench_compile.log" 2>&1
rc2=$?
tail -9 "$OUT/bench_compile.log"
echo "bench_compile: rc=$rc2"
[ $rc -eq 0 ] && [ $rc2 -eq 0 ]

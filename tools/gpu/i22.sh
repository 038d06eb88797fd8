#!/usr/bin/env bash
# Issue 22's GPU checks: host time per eager launch (registry default against forced backends), then the
# decode-shaped writes on both backends beside their dependent-load probe.
set -u
timeout 120 python3 benchmarks/host_launch.py --out "$OUT/host_launch.json" >"$OUT/host_launch.log" 2>&1
rc=$?
tail -13 "$OUT/host_launch.log"
echo "host_launch: rc=$rc"
timeout 150 python3 benchmarks/bench_decode_write.py --fold-tiles 128,64 --out "$OUT/bench_decode_write.json" >"$OUT/bench_decode_write.log" 2>&1
rc2=$?
grep -E "/ cuda|/ SGLang|real-KV off \[cuda|PARTIAL, 2 sources \[" "$OUT/bench_decode_write.log" | head -40
echo "bench_decode_write: rc=$rc2"
[ $rc -eq 0 ] && [ $rc2 -eq 0 ]

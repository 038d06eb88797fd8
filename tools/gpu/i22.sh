#!/usr/bin/env bash
# Issue 22's GPU checks: host time per eager launch, the registry's default against the forced backends.
set -u
timeout 120 python3 benchmarks/host_launch.py --out "$OUT/host_launch.json" >"$OUT/host_launch.log" 2>&1
rc=$?
tail -12 "$OUT/host_launch.log"
echo "host_launch: rc=$rc"
exit $rc

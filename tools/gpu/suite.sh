#!/usr/bin/env bash
# Every benchmark of issue 36's "nothing slower" list, run in the tree given as $1 (default: this one),
# records into $OUT/<name>.json and logs into $OUT/<name>.log, each bounded in time; prints each one's
# wall time and exit status. Used for the before tree (an archive of the commit before round 4) and after.
set -u
TREE=${1:-$PWD}
mkdir -p "$OUT"
cd "$TREE" || exit 1
run() {  # run NAME SECONDS ARGS...
    local name=$1 secs=$2
    shift 2
    local t0=$SECONDS
    timeout "$secs" python3 "benchmarks/$name.py" --out "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1
    echo "$name: rc=$? in $((SECONDS - t0)) s"
}
run host_launch 60
run bench_cuda 120 --quick
run bench_backends 120 --quick
run bench_decode_write 90
run bench_triton 180 --quick
run bench_engine 120
run bench_transformers 150 --device cuda --rounds 2
run bench_compile 150

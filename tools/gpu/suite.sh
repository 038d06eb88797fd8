#!/usr/bin/env bash
# Issue 36's "nothing slower" list run before and after on one machine: for each benchmark named in $BENCHES
# (default: all eight), the before tree ($BEFORE_TGZ, default .gpucache/before.tgz, a git archive of the commit before round 4,
# unpacked into /tmp/before with its own entry points) and then this tree, back to back, each bounded in time.
# Records go to $OUT/{before,after}/<name>.json, logs beside them; prints each run's wall time and status.
set -u
AFTER=$PWD
mkdir -p "$OUT/before" "$OUT/after" /tmp/before
if [ ! -f /tmp/before/pyproject.toml ]; then
    tar -xzf "${BEFORE_TGZ:-.gpucache/before.tgz}" -C /tmp/before || exit 1
    (cd /tmp/before && PYTHONPATH=/tmp/site python3 -m pip install -q --no-index --no-deps --no-build-isolation \
        --no-compile --target /tmp/kvc-before . >/dev/null 2>&1) || echo "warning: before tree's entry points"
fi
declare -A SECS=([bench_fast_step]=70 [host_launch]=45 [bench_cuda]=60 [bench_backends]=60 [bench_decode_write]=45
    [bench_triton]=90 [bench_engine]=100 [bench_transformers]=100 [bench_compile]=90)
declare -A ARGS=([bench_fast_step]="--device cuda --quick" [bench_cuda]="--quick" [bench_backends]="--quick" [bench_triton]="--quick"
    [bench_transformers]="--device cuda --rounds 1")
one() {  # one LABEL TREE PYTHONPATH NAME
    local t0=$SECONDS
    # shellcheck disable=SC2086
    (cd "$2" && PYTHONPATH=$3 timeout "${SECS[$4]}" python3 "benchmarks/$4.py" --out "$OUT/$1/$4.json" ${ARGS[$4]:-} \
        >"$OUT/$1/$4.log" 2>&1)
    echo "$4 $1: rc=$? in $((SECONDS - t0)) s"
}
# $BUDGET (seconds, default 560): a pair that might not finish inside it is skipped and said so
for name in ${BENCHES:-host_launch bench_transformers bench_engine bench_cuda bench_backends bench_decode_write bench_triton bench_compile}; do
    if [ $((SECONDS + 2 * ${SECS[$name]})) -gt "${BUDGET:-560}" ]; then echo "$name: skipped (budget)"; continue; fi
    one before /tmp/before "/tmp/site:/tmp/before:/tmp/kvc-before" "$name"
    one after "$AFTER" "$PYTHONPATH" "$name"
done

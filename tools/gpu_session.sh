#!/usr/bin/env bash
# One GPU-machine session in phases: ./tools/gpu_session.sh PHASE... (setup is implied)
#   tests     GPU tests of both backends (parity, graphs, large sizes), the demo on cuda
#   cudacheck the cuda backend's GPU tests, memcheck and racecheck (after a kernel change)
#   sanitize  compute-sanitizer memcheck + racecheck over every kernel (cuda and triton: tests/gpu/sanitize.py)
#   bench     floors and every benchmark: records into $OUT/<name>.json, details into $OUT/raw/
#   benchcuda bench_cuda and bench_backends alone
#   cache     save the NVRTC and Triton compile caches to $OUT (carry them back as .gpucache/)
#   pack      bundle every log and result in $OUT into results.tar
#   NAME      tools/gpu/NAME.sh, one issue's GPU checks (its own logs under $OUT/NAME/), at most
#             $PHASE_SECONDS (default 300 s)
# Logs go to $OUT/<phase>.log; each phase prints a short verdict. Carry .whl/: the shared pydantic wheels and
# the build backend, hatchling (with packaging, pathspec, pluggy, trove-classifiers), which installs the
# backends' entry points (tools/gpu/wave3b.sh's header has the download line).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
# the build backend (hatchling) travels in .whl too: the install registers the backends' entry points
PYTHONPATH=/tmp/site python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/kvc . \
    >/dev/null 2>&1 || echo "warning: could not install the entry points"
export PYTHONPATH=/tmp/site:$PWD:$PWD/contracts:$PWD/backends:/tmp/kvc PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
export KVCANARY_CUDA_CACHE_DIR=/tmp/kvc-cuda-cache
if [ -f .gpucache/cuda.tar ]; then mkdir -p "$KVCANARY_CUDA_CACHE_DIR" && tar -xf .gpucache/cuda.tar -C "$KVCANARY_CUDA_CACHE_DIR"; fi
if ls .gpucache/triton.tgz.* >/dev/null 2>&1; then mkdir -p ~/.triton/cache && cat .gpucache/triton.tgz.* | tar -xzf - -C ~/.triton/cache; fi

phase_tests() {
    timeout 380 python3 -m pytest tests/backends/cuda/test_gpu_parity.py tests/backends/cuda/test_gpu_graph.py \
        tests/backends/triton -o addopts="" -q -rfE -p no:cacheprovider --durations=8 -x >"$OUT/tests.log" 2>&1
    echo "pytest gpu: rc=$?"; grep -E "passed|failed|error" "$OUT/tests.log" | tail -3
    timeout 90 python3 -m kvcanary.cli demo --device cuda >"$OUT/demo.log" 2>&1
    echo "demo on cuda: rc=$?"; tail -4 "$OUT/demo.log"
}

memcheck() {  # memcheck BACKEND SECONDS: compute-sanitizer memcheck over tests/gpu/sanitize.py
    timeout "$2" compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
        python3 tests/gpu/sanitize.py --backend "$1" --quick >"$OUT/memcheck_$1.log" 2>&1
    echo "memcheck $1: rc=$?"; tail -3 "$OUT/memcheck_$1.log"
}

racecheck() {  # racecheck BACKEND: compute-sanitizer racecheck over tests/gpu/sanitize.py
    timeout 90 compute-sanitizer --tool racecheck --error-exitcode 3 \
        python3 tests/gpu/sanitize.py --backend "$1" --quick --count 2 >"$OUT/racecheck_$1.log" 2>&1
    echo "racecheck $1: rc=$?"; tail -3 "$OUT/racecheck_$1.log"
}

phase_sanitize() {
    timeout 60 python3 tests/gpu/sanitize.py --backend triton --quick >"$OUT/warm_triton.log" 2>&1
    echo "triton warm: rc=$?"
    memcheck cuda 150
    memcheck triton 130
    racecheck cuda
    racecheck triton
}

bench() {  # bench NAME SECONDS LINES [ARGS...]: benchmarks/NAME.py --out $OUT/NAME.json, the log's last LINES lines
          # (the details file goes to $OUT/raw/NAME_raw.json: benchmarks/report.py)
    local name=$1 secs=$2 lines=$3
    shift 3
    timeout "$secs" python3 "benchmarks/$name.py" --out "$OUT/$name.json" "$@" >"$OUT/$name.log" 2>&1
    echo "$name: rc=$?"; tail -"$lines" "$OUT/$name.log"
}

phase_bench() {
    bench bench_cuda 200 30
    bench bench_triton 300 40
    bench bench_backends 200 16
    bench bench_engine 120 12
    timeout 60 python3 benchmarks/host_overhead.py --device cuda --calls 5000 --out "$OUT/host_overhead_cuda.json" \
        >"$OUT/host_overhead.log" 2>&1
    echo "host overhead: rc=$?"; tail -8 "$OUT/host_overhead.log"
}

phase_benchcuda() {  # the cuda backend's benchmark and the head-to-head (after a cuda kernel change)
    bench bench_cuda 200 30
    bench bench_backends 200 16
}

phase_cudacheck() {  # the cuda backend alone: GPU parity + graph tests, memcheck, racecheck (after a kernel change)
    timeout 240 python3 -m pytest tests/backends/cuda/test_gpu_parity.py tests/backends/cuda/test_gpu_graph.py \
        -o addopts="" -q -rfE -p no:cacheprovider -x >"$OUT/tests_cuda.log" 2>&1
    echo "pytest cuda: rc=$?"; grep -E "passed|failed|error" "$OUT/tests_cuda.log" | tail -3
    memcheck cuda 150
    racecheck cuda
}

phase_cache() {
    [ -d "$KVCANARY_CUDA_CACHE_DIR" ] && tar -cf "$OUT/cuda.tar" -C "$KVCANARY_CUDA_CACHE_DIR" .
    [ -d ~/.triton/cache ] && tar -czf - -C ~/.triton/cache . | split -b 15m - "$OUT/triton.tgz."
    ls -la "$OUT"/*.tar 2>/dev/null
}

phase_pack() {  # one file back instead of many (the tool returns at most 8)
    (cd "$OUT" && tar -cf results.tar --exclude=results.tar --exclude='*.tar' --exclude='triton.tgz.*' . \
        && find . -maxdepth 1 -type f ! -name '*.tar' ! -name 'triton.tgz.*' -delete && rm -rf raw)
    ls -la "$OUT"
}

phase_script() {  # phase_script NAME: tools/gpu/NAME.sh with OUT=$OUT/NAME, bounded in time
    mkdir -p "$OUT/$1"
    OUT="$OUT/$1" timeout "${PHASE_SECONDS:-300}" bash "tools/gpu/$1.sh" >"$OUT/$1.log" 2>&1
    echo "$1: rc=$?"; tail -15 "$OUT/$1.log"
}

for p in "$@"; do
    if [ -f "tools/gpu/$p.sh" ]; then phase_script "$p"; else "phase_$p"; fi
done

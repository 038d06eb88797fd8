# Sourced by the GPU call scripts (tools/gpu/*.sh): rc, the OR of every step's exit status, and step.
# step NAME SECONDS CMD...: run CMD bounded, its output to $OUT/NAME.log, one verdict line (exit status, seconds,
# the log's last pytest or compute-sanitizer summary).
rc=0
step() {
    local name=$1 secs=$2; shift 2
    local t0=$SECONDS
    timeout "$secs" "$@" >"$OUT/$name.log" 2>&1
    local r=$?; rc=$((rc | r))
    echo "$name: rc=$r in $((SECONDS - t0)) s  $(grep -E '[0-9]+ (passed|failed)|ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$name.log" | tail -1)"
}

# manager_gpu SECONDS: the manager's GPU tests (its graphs, an engine's capture, batch reuse, pinned inputs, the pump,
# the TAIL read-back, budget, capture safety) and the transformers integration's, bounded; then their failures.
manager_gpu() {
    step manager_gpu "$1" python3 -m pytest tests/manager/test_gpu_graphs.py tests/manager/test_gpu_engine_capture.py \
        tests/manager/test_batch_reuse.py tests/manager/test_pinned.py tests/manager/test_pump.py \
        tests/manager/test_tail_readback.py tests/manager/test_budget.py tests/manager/test_graphs.py \
        tests/manager/test_capture_safety.py tests/integrations/transformers/test_gpu.py \
        -o addopts="" -q -rfE -p no:cacheprovider
    grep -E "^(FAILED|ERROR)" "$OUT/manager_gpu.log" | head -12
}

# v_branch SECONDS: V's fork GPU tests (tests/manager/test_gpu_v_branch.py), then their failures.
v_branch() {
    step v_branch "$1" python3 -m pytest tests/manager/test_gpu_v_branch.py -o addopts="" -q -rfE --tb=short \
        -p no:cacheprovider
    grep -E "^(FAILED|ERROR)|^E " "$OUT/v_branch.log" | head -16 | cut -c1-200
}

# fast NAME FORK: bench_fast_step --quick with V's fork on (1) or off (0), its figures' lines.
fast() {
    step "$1" 45 python3 -c "import runpy, sys; import kvcanary.manager.branch as b; b.ON_BY_DEFAULT = bool($2); \
sys.argv = ['bench_fast_step.py', '--device', 'cuda', '--quick', '--out', '$OUT/$1.json']; \
runpy.run_path('benchmarks/bench_fast_step.py', run_name='__main__')"
    grep -E "canary device time|host time|share of the wall|alone" "$OUT/$1.log" | cut -c1-150
}

# before7: unpack and install the seventh pass's tree (023ee1b, carried as .gpucache/before7.tgz) for old.
before7() {
    mkdir -p /tmp/before7 && tar -xzf .gpucache/before7.tgz -C /tmp/before7 && (cd /tmp/before7 && \
        PYTHONPATH=/tmp/site python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile \
        --target /tmp/kvc-before7 . >/dev/null 2>&1) || echo "warning: the seventh pass's tree"
}

# old NAME: bench_fast_step --quick of the seventh pass's tree (after before7), its figures' lines.
old() {
    (cd /tmp/before7 && PYTHONPATH=/tmp/site:/tmp/before7:/tmp/before7/contracts:/tmp/before7/backends:/tmp/kvc-before7 \
        timeout 45 python3 benchmarks/bench_fast_step.py --device cuda --quick --out "$OUT/$1.json" >"$OUT/$1.log" 2>&1)
    echo "$1: rc=$?"; grep -E "canary device time|host time|share of the wall|alone" "$OUT/$1.log" | cut -c1-150
}

# budget_gpu: the verify budget's kernels on the GPU (session 12 changed them: the cursor a token position, no move
# on overflow): their parity tests, then memcheck and racecheck over verify_budget on both backends.
budget_gpu() {
    step budget_tests 120 python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py \
        tests/manager/test_budget.py tests/manager/test_budget_coverage.py -o addopts="" -q -rfE -p no:cacheprovider
    grep -E "^(FAILED|ERROR)" "$OUT/budget_tests.log" | head -8 | cut -c1-200
    local b
    for b in cuda triton; do
        step "memcheck_budget_$b" 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
            python3 tests/gpu/sanitize.py --backend $b --quick --ops verify_budget
        step "racecheck_budget_$b" 60 compute-sanitizer --tool racecheck --error-exitcode 3 \
            python3 tests/gpu/sanitize.py --backend $b --quick --ops verify_budget
    done
}

# graph_launch SECONDS: benchmarks/graph_launch.py (where a graph launch's host time goes), its figures' lines.
graph_launch() {
    step graph_launch "$1" python3 benchmarks/graph_launch.py --out "$OUT/graph_launch.json"
    grep -E "replay|cuGraphLaunch|add_|floor|other thread" "$OUT/graph_launch.log" | head -30 | cut -c1-110
}

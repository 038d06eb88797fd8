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

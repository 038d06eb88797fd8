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

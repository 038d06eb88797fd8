#!/usr/bin/env bash
# Wave 3, session 12's GPU call (none came: the next session's first), run with V's fork on by default in the
# tree (kvcanary/manager/branch.py ON_BY_DEFAULT = True, uncommitted): the budget kernels' checks; where a graph
# launch's host time goes (benchmarks/graph_launch.py: torch's replay and the driver's launch, main thread, busy
# device, worker thread, two streams, after a forward's footprint, inside generate_batch); the fork's GPU tests;
# bench_fast_step with the fork on and off (issue 36 item 2); the manager's other GPU tests; bench_triton's writes
# with Triton's write variants 3 and 0 (item 5); the seventh pass's tree for the host-time pair, as time allows.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc, step, manager_gpu, v_branch, fast, before7, old
python3 -c "import torch, triton, kvcanary.manager.branch as b; print(torch.cuda.get_device_name(), torch.__version__, \
triton.__version__, 'fork', b.ON_BY_DEFAULT)"
# session 12 changed the budget kernels (the cursor a token position; no move on overflow): parity on the GPU,
# memcheck and racecheck over verify_budget on both backends, before anything else
step budget_tests 120 python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py \
    tests/manager/test_budget.py tests/manager/test_budget_coverage.py -o addopts="" -q -rfE -p no:cacheprovider
for b in cuda triton; do
    step "memcheck_budget_$b" 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
        python3 tests/gpu/sanitize.py --backend $b --quick --ops verify_budget
    step "racecheck_budget_$b" 60 compute-sanitizer --tool racecheck --error-exitcode 3 \
        python3 tests/gpu/sanitize.py --backend $b --quick --ops verify_budget
done
step graph_launch 90 python3 benchmarks/graph_launch.py --out "$OUT/graph_launch.json"
grep -E "replay|cuGraphLaunch|add_|floor|other thread" "$OUT/graph_launch.log" | head -30 | cut -c1-110
v_branch 100
tri() {  # tri NAME VARIANT: bench_triton --only write with TUNING["write_variant"] = VARIANT
    step "$1" 70 python3 -c "import runpy, sys; from kvcanary_backends.triton._jit import TUNING; \
TUNING['write_variant'] = $2; sys.argv = ['bench_triton.py', '--only', 'write', '--out', '$OUT/$1.json']; \
runpy.run_path('benchmarks/bench_triton.py', run_name='__main__')"
    grep -E "^ *write" "$OUT/$1.log" | cut -c1-150
}
before7
left() { echo $(( ${W12_SECONDS:-540} - SECONDS )); }
fast fast_on1 1; fast fast_off1 0
m=$(( $(left) - 20 )); manager_gpu $(( m < 130 ? m : 130 ))  # the rest after it, each only while its time is left
[ "$(left)" -gt 140 ] && { tri tri_v3 3; tri tri_v0 0; }
[ "$(left)" -gt 50 ] && old fast_old1
exit $rc

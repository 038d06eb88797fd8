#!/usr/bin/env bash
# Wave 3, session 13's GPU call (w12a reordered for a short lease), run with V's fork on by default in the tree
# (kvcanary/manager/branch.py ON_BY_DEFAULT = True, uncommitted): the budget kernels' GPU parity, memcheck and
# racecheck; V's fork's GPU tests; bench_fast_step with the fork on and off (issue 36 item 2); where a graph
# launch's host time goes (benchmarks/graph_launch.py); then the manager's GPU tests and the host-time pair with the
# seventh pass's tree, each only while $W13_SECONDS (default 480) lasts.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc, step, manager_gpu, v_branch, fast, before7, old
left() { echo $(( ${W13_SECONDS:-480} - SECONDS )); }
python3 -c "import torch, triton, kvcanary.manager.branch as b; print(torch.cuda.get_device_name(), torch.__version__, \
triton.__version__, 'fork', b.ON_BY_DEFAULT)"
step budget_tests 120 python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py \
    tests/manager/test_budget.py tests/manager/test_budget_coverage.py -o addopts="" -q -rfE -p no:cacheprovider
grep -E "^(FAILED|ERROR)" "$OUT/budget_tests.log" | head -8 | cut -c1-200
for b in cuda triton; do
    step "memcheck_budget_$b" 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
        python3 tests/gpu/sanitize.py --backend $b --quick --ops verify_budget
    step "racecheck_budget_$b" 60 compute-sanitizer --tool racecheck --error-exitcode 3 \
        python3 tests/gpu/sanitize.py --backend $b --quick --ops verify_budget
done
[ "$(left)" -gt 100 ] && v_branch 90
[ "$(left)" -gt 90 ] && { fast fast_on1 1; fast fast_off1 0; }
[ "$(left)" -gt 80 ] && { step graph_launch 75 python3 benchmarks/graph_launch.py --out "$OUT/graph_launch.json"
    grep -E "replay|cuGraphLaunch|add_|floor|other thread" "$OUT/graph_launch.log" | head -30 | cut -c1-110; }
m=$(( $(left) - 60 )); [ "$m" -gt 40 ] && manager_gpu $(( m < 130 ? m : 130 ))
[ "$(left)" -gt 60 ] && { before7; old fast_old1; }
exit $rc

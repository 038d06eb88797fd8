#!/usr/bin/env bash
# Wave 3, session 13's GPU call (w12a reordered for a short lease), run with V's fork on by default in the tree
# (kvcanary/manager/branch.py ON_BY_DEFAULT = True, uncommitted): the budget kernels' GPU parity, memcheck and
# racecheck; V's fork's GPU tests; bench_fast_step with the fork on and off (issue 36 item 2); where a graph
# launch's host time goes (benchmarks/graph_launch.py); then the manager's GPU tests and the host-time pair with the
# seventh pass's tree, each only while $W13_SECONDS (default 480) lasts.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc, step, budget_gpu, graph_launch, manager_gpu, v_branch, fast, before7, old
left() { echo $(( ${W13_SECONDS:-480} - SECONDS )); }
python3 -c "import torch, triton, kvcanary.manager.branch as b; print(torch.cuda.get_device_name(), torch.__version__, \
triton.__version__, 'fork', b.ON_BY_DEFAULT)"
budget_gpu  # the budget kernels' parity, memcheck and racecheck, before anything else
[ "$(left)" -gt 100 ] && v_branch 90
[ "$(left)" -gt 90 ] && { fast fast_on1 1; fast fast_off1 0; }
[ "$(left)" -gt 80 ] && graph_launch 75
m=$(( $(left) - 60 )); [ "$m" -gt 40 ] && manager_gpu $(( m < 130 ? m : 130 ))
[ "$(left)" -gt 60 ] && { before7; old fast_old1; }
exit $rc

#!/usr/bin/env bash
# Wave 3, session 12's GPU call (none came: the next session's first), run with V's fork on by default in the
# tree (kvcanary/manager/branch.py ON_BY_DEFAULT = True, uncommitted): the budget kernels' checks; where a graph
# launch's host time goes (benchmarks/graph_launch.py: torch's replay and the driver's launch, main thread, busy
# device, worker thread, two streams, after a forward's footprint, inside generate_batch); the fork's GPU tests;
# bench_fast_step with the fork on and off (issue 36 item 2); the manager's other GPU tests; bench_triton's writes
# with Triton's write variants 3 and 0 (item 5); the seventh pass's tree for the host-time pair, as time allows.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc, step, budget_gpu, graph_launch, manager_gpu, v_branch, fast, before7, old
python3 -c "import torch, triton, kvcanary.manager.branch as b; print(torch.cuda.get_device_name(), torch.__version__, \
triton.__version__, 'fork', b.ON_BY_DEFAULT)"
budget_gpu  # the budget kernels' parity, memcheck and racecheck, before anything else
graph_launch 90
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

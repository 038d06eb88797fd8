#!/usr/bin/env bash
# Wave 3, issue 36 item 2: the budgeted forward's nodes. The manager's GPU tests of the launch lists, the
# unbucketed staging (one torch.cat) and the captured V branch (graphs and an engine-captured budgeted forward
# equal eager), the per-node-group breakdown of the budgeted HEAD + TAIL graph (budget_nodes), the launch counts,
# then bench_fast_step's four cases. Steps bounded at 90 + 80 + 20 + 280 = 470 s.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
step tests 90 python3 -m pytest tests/manager/test_gpu_graphs.py tests/manager/test_capture_safety.py \
    tests/manager/test_budget.py tests/manager/test_gpu_engine_capture.py tests/manager/test_unbucketed_staging.py \
    tests/benchmarks/test_budget_nodes.py -o addopts="" -q -rfE -p no:cacheprovider --durations=3
step budget_nodes 80 python3 benchmarks/budget_nodes.py --device cuda --out "$OUT/budget_nodes.json"
sed -n '/all: /,/^$/p' "$OUT/budget_nodes.log" | cut -c1-150
sed -n '/^== budget_nodes/,$p' "$OUT/budget_nodes.log" | grep -E ", (all|all, in turn|V on a second branch|what if: K only)," \
    | cut -c1-120
step budget_launches 20 python3 benchmarks/budget_launches.py --device cuda
tail -6 "$OUT/budget_launches.log" | cut -c1-150
step bench_fast_step 280 python3 benchmarks/bench_fast_step.py --device cuda --out "$OUT/bench_fast_step.json"
sed -n '/^== bench_fast_step/,$p' "$OUT/bench_fast_step.log" | grep -E "canary device (time|share of the step,)|alone" \
    | cut -c1-150
exit $rc

#!/usr/bin/env bash
# Issue 36, item 4 (branch h7): the cuda kernels changed after the candidates' run (benchmarks/results/raw/
# explore_i36x.log): streaming stores in the plan's tile path (plan, plan_entries) and the scatter, and the write's
# decode folds loading a guessed slot with the offsets. On the GPU, in one run:
#   1. parity: the cuda backend's GPU tests (parity, graphs, hostile values) against torch_ref;
#   2. compute-sanitizer memcheck and racecheck over tests/gpu/sanitize.py for the changed operations;
#   3. benchmarks/bench_i36k.py: plan, scatter and decode writes beside their floors (cuda goals: plan <= 1.25x the
#      stream probe, scatter <= 1.5x its bytes at copy bandwidth, PARTIAL writes <= 1.5x the dependent-load probe).
# Run through the session driver, which installs the wheels and sets PYTHONPATH:
#   PHASE_SECONDS=420 ./tools/gpu_session.sh i36y
set -u
mkdir -p "$OUT"
rc=0
OPS=plan,plan_entries,scatter_req_token_ids,write
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"

timeout 150 python3 -m pytest tests/backends/cuda/test_gpu_parity.py tests/backends/cuda/test_gpu_graph.py \
    tests/backends/test_hostile_gpu.py -k "not triton" -o addopts="" -q -rfE -p no:cacheprovider \
    >"$OUT/tests_cuda.log" 2>&1
r=$?; rc=$((rc | r))
echo "pytest cuda: rc=$r"; grep -E "passed|failed|error" "$OUT/tests_cuda.log" | tail -3

timeout 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 tests/gpu/sanitize.py --backend cuda --quick --ops $OPS >"$OUT/memcheck_cuda.log" 2>&1
r=$?; rc=$((rc | r))
echo "memcheck cuda $OPS: rc=$r"; tail -2 "$OUT/memcheck_cuda.log"
timeout 60 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 tests/gpu/sanitize.py --backend cuda --quick --count 2 --ops $OPS >"$OUT/racecheck_cuda.log" 2>&1
r=$?; rc=$((rc | r))
echo "racecheck cuda $OPS: rc=$r"; tail -2 "$OUT/racecheck_cuda.log"

timeout 110 python3 benchmarks/bench_i36k.py --out "$OUT/bench_i36k.json" >"$OUT/bench_i36k.log" 2>&1
r=$?; rc=$((rc | r))
echo "bench_i36k: rc=$r"
sed -n '/^== /,$p' "$OUT/bench_i36k.log" | cut -c1-170 | head -70
exit $rc

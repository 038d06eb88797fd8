#!/usr/bin/env bash
# Wave 3, session 3, the GPU checks after every merge (under 7 minutes): the GPU tests of what changed (the
# manager's graphs and its replayed forward, the owner map, extensions, cuda and Triton parity, graphs and
# golden vectors, hostile input on the GPU, the external operation, selection, the fold), transformers with the
# isolate policy and the owner check, the served canary on cuda, memcheck and racecheck over the kernels, then
# the figures of what changed: kernels old and new (bench_i36k), the manager's HEAD/TAIL around its replays
# (bench_manager_graphs), the isolate policy's overhead (bench_guard). One verdict line per step.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 200 python3 -m pytest tests/manager/test_gpu_graphs.py tests/gpu/test_owner_map_gpu.py \
    tests/gpu/test_extensions_gpu.py tests/backends/cuda/test_gpu_parity.py tests/backends/cuda/test_gpu_graph.py \
    tests/backends/triton/test_plan_scan.py tests/backends/triton/test_write_fold_tile.py \
    tests/backends/triton/test_gpu.py tests/backends/triton/test_golden.py tests/backends/triton/test_backend.py \
    tests/backends/test_hostile_gpu.py tests/backends/test_replay_gpu.py tests/manager/test_pump.py ${EXTRA_TESTS:-} \
    tests/kvcanary/test_external_operation.py tests/kvcanary/test_registry.py tests/kvcanary/test_priority.py \
    tests/distributed/test_digest.py -o addopts="" -q -rfE -p no:cacheprovider --durations=5
step transformers 60 python3 -m pytest tests/integrations/transformers/test_gpu.py -o addopts="" -q -rfE -p no:cacheprovider
KVCANARY_BACKEND=cuda step serve 40 python3 -m pytest tests/integrations/transformers/test_serve.py -o addopts="" \
    -q -rfE -p no:cacheprovider
step memcheck_cuda 90 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 tests/gpu/sanitize.py --backend cuda --quick --ops plan,plan_entries,scatter_req_token_ids,write,verify
step racecheck_cuda 60 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 tests/gpu/sanitize.py --backend cuda --quick --count 2 --ops plan,plan_entries,scatter_req_token_ids,write,verify
step bench_i36k 85 python3 benchmarks/bench_i36k.py --rounds 3 --out "$OUT/bench_i36k.json"
sed -n '/^== /,$p' "$OUT/bench_i36k.log" | grep -E "MISS|PASS|/ cuda" | cut -c1-150 | head -30
step bench_manager_graphs 60 python3 benchmarks/bench_manager_graphs.py --device cuda --out "$OUT/bench_manager_graphs.json"
sed -n '/^== bench_manager_graphs/,$p' "$OUT/bench_manager_graphs.log" | cut -c1-150 | head -30
step bench_guard 40 python3 benchmarks/bench_guard.py --device cuda --out "$OUT/bench_guard_cuda.json"
tail -10 "$OUT/bench_guard.log" | cut -c1-150
exit $rc

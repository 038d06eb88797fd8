#!/usr/bin/env bash
# Wave 3, session 2, the one GPU call after every merge (about 9 minutes): the GPU tests of what changed (the
# manager's own graphs, the owner map, the derived cuda tables, the Triton plan and write, the cuda scatter,
# the external operation, selection), transformers with the isolate policy and the served canary on cuda,
# memcheck over the changed kernels, then the figures: the changed kernels before and after (bench_i36k), the
# manager's host time per step (bench_transformers), the isolate policy's overhead (bench_guard), the launcher
# host path (host_launch). One verdict line per step; logs in $OUT. Each step is bounded so the whole fits.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests 180 python3 -m pytest tests/manager/test_gpu_graphs.py tests/gpu/test_owner_map_gpu.py \
    tests/gpu/test_extensions_gpu.py tests/backends/cuda/test_gpu_parity.py tests/backends/cuda/test_gpu_graph.py \
    tests/backends/triton/test_plan_scan.py tests/backends/triton/test_write_fold_tile.py \
    tests/backends/triton/test_gpu.py tests/backends/triton/test_golden.py tests/backends/triton/test_backend.py \
    tests/kvcanary/test_external_operation.py tests/kvcanary/test_registry.py tests/kvcanary/test_priority.py \
    tests/distributed/test_digest.py -o addopts="" -q -rfE -p no:cacheprovider --durations=5
step transformers 45 python3 -m pytest tests/integrations/transformers/test_gpu.py -o addopts="" -q -rfE -p no:cacheprovider
KVCANARY_BACKEND=cuda step serve 40 python3 -m pytest tests/integrations/transformers/test_serve.py -o addopts="" \
    -q -rfE -p no:cacheprovider
step memcheck_triton 40 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 tests/gpu/sanitize.py --backend triton --quick --ops plan,write
step memcheck_cuda 35 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 tests/gpu/sanitize.py --backend cuda --quick --ops scatter_req_token_ids,plan,write
step bench_i36k 85 python3 benchmarks/bench_i36k.py --rounds 3 --out "$OUT/bench_i36k.json"
sed -n '/^== /,$p' "$OUT/bench_i36k.log" | cut -c1-170 | head -40
step bench_transformers 85 python3 benchmarks/bench_transformers.py --device cuda --rounds 2 \
    --out "$OUT/bench_transformers_cuda.json"
sed -n '/^== bench_transformers/,$p' "$OUT/bench_transformers.log" | cut -c1-150
step bench_guard 35 python3 benchmarks/bench_guard.py --device cuda --out "$OUT/bench_guard_cuda.json"
tail -8 "$OUT/bench_guard.log" | cut -c1-150
step host_launch 25 python3 benchmarks/host_launch.py --out "$OUT/host_launch.json"
tail -12 "$OUT/host_launch.log" | cut -c1-150
exit $rc

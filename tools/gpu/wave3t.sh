#!/usr/bin/env bash
# Wave 3, session 6, GPU call 1 of 2: the GPU tests of everything this session changed, and the sanitizers.
# The manager: pinned inputs copied by the staged HEAD graph, the read-back copied by the TAIL graph, one staging
# cat, V endpoints on a second branch under capture (graphs and an engine-captured forward equal eager), the
# verify budget's kernels after the garbage-offset fix; the transformers integration on cuda; the cuda write's
# candidate kernels (KVC_WRITE_VARIANT) against torch_ref; memcheck over the budget kernels and the write's
# variant 7, racecheck over the budget kernel; then bench_transformers and bench_fast_step's bs 64 x 2048 case.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton, transformers; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, transformers.__version__)"
step tests_manager 150 python3 -m pytest tests/manager/test_gpu_graphs.py tests/manager/test_batch_reuse.py \
    tests/manager/test_pump.py tests/manager/test_quiet_step.py tests/manager/test_stats.py \
    tests/manager/test_capture_safety.py tests/manager/test_pinned.py tests/manager/test_tail_readback.py \
    tests/manager/test_budget.py tests/manager/test_gpu_engine_capture.py tests/manager/test_unbucketed_staging.py \
    tests/benchmarks/test_budget_nodes.py tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=3
KVCANARY_BACKEND=cuda step tf_gpu_cuda 60 python3 -m pytest tests/integrations/transformers/test_gpu.py \
    -o addopts="" -q -rfE -p no:cacheprovider
SANITIZE_VARIANT='import runpy, sys
from kvcanary_backends.cuda import write
write.VARIANT = int(sys.argv[1])
sys.argv = ["tests/gpu/sanitize.py", *sys.argv[2:]]
runpy.run_path("tests/gpu/sanitize.py", run_name="__main__")'
step compile 40 python3 -c "
from kvcanary_backends.cuda import write
from kvcanary_backends.cuda._toolchain import arch_of, compile_all
specs = [write.spec(*k, variant=v) for v in write.VARIANTS for k in write.KERNELS.preload]
compile_all(specs, arch_of(0))
print(len(specs), 'write specializations compiled')"
step tests_write 80 python3 -m pytest tests/backends/cuda/test_write_variants.py tests/backends/cuda/test_gpu_parity.py \
    -m gpu -k "write or Write" -o addopts="" -q -rfE -p no:cacheprovider --durations=3
step memcheck_budget 60 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 -m pytest tests/backends/cuda/test_budget.py tests/backends/triton/test_budget.py -o addopts="" -q \
    -p no:cacheprovider -x
step memcheck_write_v7 35 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 KVCANARY_CUDA_LINEINFO=1 compute-sanitizer \
    --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 -c "$SANITIZE_VARIANT" 7 --backend cuda --quick --ops write
step racecheck_budget 35 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 -m pytest tests/backends/cuda/test_budget.py -o addopts="" -q -p no:cacheprovider -x -k gpu
step bench_transformers 100 python3 benchmarks/bench_transformers.py --device cuda --rounds 1 \
    --out "$OUT/bench_transformers_cuda.json"
grep -E "steady" "$OUT/bench_transformers.log" | tail -6 | cut -c1-160
exit $rc

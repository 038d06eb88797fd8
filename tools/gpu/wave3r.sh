#!/usr/bin/env bash
# Wave 3, issue 36 item 4: the cuda write's candidate kernels (KVC_WRITE_VARIANT bits: 1 the lean decode chain,
# 2 the fold's early strips, 4 with 2 the one-token fold; 0 today's). The write's GPU parity tests (cuda: every variant's kernel and the
# default against torch_ref; Triton: both fold tiles, graph replay), compute-sanitizer memcheck and racecheck over
# variant 7 (every changed path; the other variants are subsets of it; variant 0's PTX is byte for byte the kernel
# the last pass sanitized),
# memcheck over Triton's write, then the figures: every variant side by side, each beside its floor probe and
# checked to store the default's bytes (bench_write_variants), and bench_decode_write with the Triton decode fold
# tiles 16 and 64 beside the default 32. One verdict line per step; logs in $OUT. About 410 s at most.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"

# python3 -c "$SANITIZE_VARIANT" V ARGS...: tests/gpu/sanitize.py ARGS with the cuda write built as KVC_WRITE_VARIANT=V
# (its environment set first: torch is imported before sanitize.py would set it)
SANITIZE_VARIANT='import runpy, sys
from kvcanary_backends.cuda import write
write.VARIANT = int(sys.argv[1])
print("cuda write built as", write.KERNELS.spec(2, True, False, True).label(), flush=True)
sys.argv = ["tests/gpu/sanitize.py", *sys.argv[2:]]
runpy.run_path("tests/gpu/sanitize.py", run_name="__main__")'
SAN_ENV=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 KVCANARY_CUDA_LINEINFO=1)

# every variant of every default write specialization, compiled into the on-disk cache by worker processes
step compile 40 python3 -c "
from kvcanary_backends.cuda import write
from kvcanary_backends.cuda._toolchain import arch_of, compile_all
specs = [write.spec(*k, variant=v) for v in write.VARIANTS for k in write.KERNELS.preload]
compile_all(specs, arch_of(0))
print(len(specs), 'write specializations compiled')"
step tests_cuda 80 python3 -m pytest tests/backends/cuda/test_write_variants.py tests/backends/cuda/test_gpu_parity.py \
    -m gpu -k "write or Write" -o addopts="" -q -rfE -p no:cacheprovider --durations=5
step tests_triton 40 python3 -m pytest tests/backends/triton/test_write_fold_tile.py tests/backends/triton/test_gpu.py \
    -o addopts="" -q -rfE -p no:cacheprovider --durations=3
step memcheck_cuda_v7 35 "${SAN_ENV[@]}" compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
    --print-limit 20 python3 -c "$SANITIZE_VARIANT" 7 --backend cuda --quick --ops write
step racecheck_cuda_v7 50 "${SAN_ENV[@]}" compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 -c "$SANITIZE_VARIANT" 7 --backend cuda --quick --count 2 --ops write
step memcheck_triton 35 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 tests/gpu/sanitize.py --backend triton --quick --ops write
step bench_write_variants 60 python3 benchmarks/bench_write_variants.py --out "$OUT/bench_write_variants.json"
sed -n '/^== /,$p' "$OUT/bench_write_variants.log" | cut -c1-170 | head -130
step bench_decode_write 70 python3 benchmarks/bench_decode_write.py --fold-tiles 16,64 \
    --out "$OUT/bench_decode_write.json"
sed -n '/^== /,$p' "$OUT/bench_decode_write.log" | grep -E "triton|probe|==" | cut -c1-170 | head -100
exit $rc

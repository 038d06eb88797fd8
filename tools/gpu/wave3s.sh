#!/usr/bin/env bash
# Wave 3, session 7, third GPU call: the cuda write's candidate kernels before one becomes the default: every variant
# compiled, the write's GPU parity tests (every variant's kernel and the default against torch_ref), memcheck and
# racecheck over variant 7 (it holds every changed path; the others are subsets of it). About 210 s.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
SANITIZE_VARIANT='import runpy, sys
from kvcanary_backends.cuda import write
variant = int(sys.argv[1])
write.variant_for = lambda ntok, rows: variant  # every launch, whatever its shape
print("cuda write built as", write.KERNELS.spec(2, True, False, True, False, False, False, variant).label(), flush=True)
sys.argv = ["tests/gpu/sanitize.py", *sys.argv[2:]]
runpy.run_path("tests/gpu/sanitize.py", run_name="__main__")'
SAN_ENV=(env PYTORCH_NO_CUDA_MEMORY_CACHING=1 KVCANARY_CUDA_LINEINFO=1)
step compile 40 python3 -c "
from kvcanary_backends.cuda import write
from kvcanary_backends.cuda._toolchain import arch_of, compile_all
specs = list({write.spec(*k[:7], variant=v): None for v in write.VARIANTS for k in write.KERNELS.preload})
compile_all(specs, arch_of(0))
print(len(specs), 'write specializations compiled')"
step tests_cuda 80 python3 -m pytest tests/backends/cuda/test_write_variants.py tests/backends/cuda/test_gpu_parity.py \
    -m gpu -k "write or Write" -o addopts="" -q -rfE -p no:cacheprovider --durations=3
grep -E "^FAILED" "$OUT/tests_cuda.log" | head -5
step memcheck_cuda_v7 35 "${SAN_ENV[@]}" compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
    --print-limit 20 python3 -c "$SANITIZE_VARIANT" 7 --backend cuda --quick --ops write
step racecheck_cuda_v7 50 "${SAN_ENV[@]}" compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 -c "$SANITIZE_VARIANT" 7 --backend cuda --quick --count 2 --ops write
exit $rc

#!/usr/bin/env bash
# Wave 3, session 6, GPU call after wave3v on the same machine: the cuda write's candidate kernels
# (KVC_WRITE_VARIANT) against torch_ref on the GPU, variant 7 (every changed path) under memcheck and racecheck,
# then bench_engine (the journal's share with the one-event-per-block feed).
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
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
step memcheck_write_v7 35 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 KVCANARY_CUDA_LINEINFO=1 compute-sanitizer \
    --tool memcheck --report-api-errors no --error-exitcode 3 --print-limit 20 \
    python3 -c "$SANITIZE_VARIANT" 7 --backend cuda --quick --ops write
step racecheck_write_v7 45 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool racecheck --error-exitcode 3 \
    python3 -c "$SANITIZE_VARIANT" 7 --backend cuda --quick --count 2 --ops write
step bench_engine 110 python3 benchmarks/bench_engine.py --device cuda --out "$OUT/bench_engine.json"
grep -iE "journal|engine_step" "$OUT/bench_engine.log" | tail -12 | cut -c1-170
exit $rc

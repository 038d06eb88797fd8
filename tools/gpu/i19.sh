#!/usr/bin/env bash
# Issue 19's GPU checks: the transformers integration on CUDA with each GPU backend (identity, clean run,
# every fault), then bench_transformers in bf16 with each backend (tokens/s with and without canaries).
# Prints one verdict line per step; JSON results land in $OUT.
set -u
mkdir -p "$OUT"
python3 -c "import transformers; print('transformers', transformers.__version__)"
rc=0
for b in triton cuda; do
    KVCANARY_BACKEND=$b timeout 60 python3 -m pytest tests/integrations/transformers/test_gpu.py -o addopts="" \
        -q -rfE -p no:cacheprovider >"$OUT/tests_$b.log" 2>&1
    r=$?; rc=$((rc | r))
    echo "transformers gpu tests [$b]: rc=$r"; grep -E "passed|failed|error" "$OUT/tests_$b.log" | tail -2
done
for b in cuda triton; do
    timeout 110 python3 benchmarks/bench_transformers.py --device cuda --backend "$b" --rounds 1 \
        --out "$OUT/bench_transformers_$b.json" >"$OUT/bench_$b.log" 2>&1
    r=$?; rc=$((rc | r))
    echo "bench_transformers [$b]: rc=$r"; grep -E "^(run |generate|tokens/s|canary_share|host)" "$OUT/bench_$b.log" | tail -14
done
exit $rc

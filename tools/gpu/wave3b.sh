#!/usr/bin/env bash
# Wave 3's engine checks on the GPU: transformers' continuous batching with canaries (identity, every fault,
# the isolate policy) on each GPU backend, and the served canary over HTTP on cuda.
set -u
mkdir -p "$OUT"
python3 -c "import transformers, torch; print('transformers', transformers.__version__, torch.cuda.get_device_name())"
rc=0
for b in ${TF_BACKENDS:-triton cuda}; do
    KVCANARY_BACKEND=$b timeout 120 python3 -m pytest tests/integrations/transformers/test_gpu.py -o addopts="" \
        -q -rfE -p no:cacheprovider >"$OUT/transformers_$b.log" 2>&1
    r=$?; rc=$((rc | r)); echo "transformers gpu tests [$b]: rc=$r"; grep -E "passed|failed|error" "$OUT/transformers_$b.log" | tail -2
done
KVCANARY_BACKEND=cuda timeout 150 python3 -m pytest tests/integrations/transformers/test_serve.py tests/monitor \
    -o addopts="" -q -rfEs -p no:cacheprovider >"$OUT/serve_cuda.log" 2>&1
r=$?; rc=$((rc | r)); echo "serve tests [cuda]: rc=$r"; grep -E "passed|failed|error|SKIP" "$OUT/serve_cuda.log" | tail -4
exit $rc

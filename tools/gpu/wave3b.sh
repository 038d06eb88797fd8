#!/usr/bin/env bash
# Wave 3's engine checks on the GPU: transformers' continuous batching with canaries (identity, every fault,
# the isolate policy) on each GPU backend, and the served canary over HTTP on cuda.
# The GPU image lacks the server's packages: before the call, in the checkout (with .whl/ in .git/info/exclude):
#   bash ../shared/device/prepare.sh   # pydantic and its needs
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
#     hatchling packaging pathspec pluggy trove-classifiers prometheus-client fastapi starlette uvicorn h11 \
#     anyio sniffio click httpx httpcore certifi idna typing-extensions annotated-doc opentelemetry-api \
#     openai httpx2 httpcore2 truststore jiter
# then carry .whl: ./tools/gpu_session.sh installs every wheel in it first.
set -u
mkdir -p "$OUT"
python3 -c "import transformers, torch; print('transformers', transformers.__version__, torch.cuda.get_device_name())"
rc=0
for b in ${TF_BACKENDS:-triton cuda}; do
    KVCANARY_BACKEND=$b timeout 120 python3 -m pytest tests/integrations/transformers/test_gpu.py -o addopts="" \
        -q -rfE -p no:cacheprovider >"$OUT/transformers_$b.log" 2>&1
    r=$?; rc=$((rc | r)); echo "transformers gpu tests [$b]: rc=$r"; grep -E "passed|failed|error" "$OUT/transformers_$b.log" | tail -2
done
# tests/monitor runs on CPU tensors: it gets no forced backend (a forced cuda cannot serve a CPU world)
KVCANARY_BACKEND=cuda timeout 150 python3 -m pytest tests/integrations/transformers/test_serve.py \
    -o addopts="" -q -rfEs -p no:cacheprovider >"$OUT/serve_cuda.log" 2>&1
r=$?; rc=$((rc | r)); echo "serve tests [cuda]: rc=$r"; grep -E "passed|failed|error|SKIP" "$OUT/serve_cuda.log" | tail -4
exit $rc

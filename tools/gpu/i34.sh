#!/usr/bin/env bash
# Issue 34's GPU checks: the served canary (transformers serve + HTTP client + /metrics + health) on CUDA with
# each GPU backend, and the monitoring sinks' unit tests. The server needs small pure-Python wheels the GPU
# image lacks (fastapi, uvicorn, openai, prometheus-client, httpx and what they require): carry them in .whl/
# (pip download ... --python-version 3.12 --platform manylinux2014_x86_64 --only-binary=:all: -d .whl).
set -u
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install --no-index --find-links .whl fastapi uvicorn openai prometheus-client httpx \
        >"$OUT/pip.log" 2>&1; echo "wheels: rc=$?"; tail -1 "$OUT/pip.log"
fi
python3 -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')"
rc=0
for b in cuda triton; do
    KVCANARY_BACKEND=$b timeout 240 python3 -m pytest tests/integrations/transformers/test_serve.py tests/monitor \
        -o addopts="" -q -rfEs -p no:cacheprovider >"$OUT/serve_$b.log" 2>&1
    r=$?; rc=$((rc | r))
    echo "serve tests [$b]: rc=$r"; grep -E "passed|failed|error|SKIP" "$OUT/serve_$b.log" | tail -4
done
exit $rc

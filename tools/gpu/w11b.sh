#!/usr/bin/env bash
# Wave 3, session 11's third GPU call, with V's fork on by default and Triton's write variant 3 the default in the
# tree: the fork's GPU tests (their corrupted world mended), bench_fast_step with the fork off and on in turn
# and the seventh pass's tree in turn (once each: issue 36 item 2, and the host time's change since), then the
# manager's other GPU tests with the fork on.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc, step, manager_gpu, v_branch, fast, before7, old
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
v_branch 100
before7
fast fast_on1 1; fast fast_off1 0; old fast_old1
manager_gpu $(( ${W11_SECONDS:-290} - SECONDS ))
exit $rc

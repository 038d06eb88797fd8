#!/usr/bin/env bash
# Wave 3, session 11's last GPU call (a few minutes left), V's fork on by default in the tree: the fork's GPU tests,
# then the manager's other GPU tests with the fork on (an engine's capture, the manager's graphs, reuse, pinned
# inputs, the pump, the TAIL read-back, budget, capture safety, the transformers integration).
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc, step, manager_gpu and v_branch
python3 -c "import torch; import kvcanary.manager.branch as b; print(torch.cuda.get_device_name(), 'fork', b.ON_BY_DEFAULT)"
v_branch 80
manager_gpu $(( ${W11_SECONDS:-200} - SECONDS ))
exit $rc

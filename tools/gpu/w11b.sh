#!/usr/bin/env bash
# Wave 3, session 11's third GPU call, with V's fork on by default and Triton's write variant 3 the default in the
# tree: the fork's GPU tests (their corrupted world mended), bench_fast_step with the fork off and on in turn
# and the seventh pass's tree in turn (once each: issue 36 item 2, and the host time's change since), then the
# manager's other GPU tests with the fork on.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc, step and manager_gpu
python3 -c "import torch, triton; print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)"
step v_branch 100 python3 -m pytest tests/manager/test_gpu_v_branch.py -o addopts="" -q -rfE --tb=short -p no:cacheprovider
grep -E "^(FAILED|ERROR)|^E " "$OUT/v_branch.log" | head -20 | cut -c1-200
fast() {  # fast NAME FORK: bench_fast_step --quick with the fork on (1) or off (0)
    step "$1" 45 python3 -c "import runpy, sys; import kvcanary.manager.branch as b; b.ON_BY_DEFAULT = bool($2); \
sys.argv = ['bench_fast_step.py', '--device', 'cuda', '--quick', '--out', '$OUT/$1.json']; \
runpy.run_path('benchmarks/bench_fast_step.py', run_name='__main__')"
    grep -E "canary device time|host time|share of the wall|alone" "$OUT/$1.log" | cut -c1-150
}
old() {  # old NAME: bench_fast_step --quick of the seventh pass's tree (023ee1b, .gpucache/before7.tgz)
    (cd /tmp/before7 && PYTHONPATH=/tmp/site:/tmp/before7:/tmp/before7/contracts:/tmp/before7/backends:/tmp/kvc-before7 \
        timeout 45 python3 benchmarks/bench_fast_step.py --device cuda --quick --out "$OUT/$1.json" >"$OUT/$1.log" 2>&1)
    echo "$1: rc=$?"; grep -E "canary device time|host time|share of the wall|alone" "$OUT/$1.log" | cut -c1-150
}
mkdir -p /tmp/before7 && tar -xzf .gpucache/before7.tgz -C /tmp/before7 && (cd /tmp/before7 && PYTHONPATH=/tmp/site \
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/kvc-before7 . \
    >/dev/null 2>&1) || echo "warning: the seventh pass's tree"
fast fast_on1 1; fast fast_off1 0; old fast_old1
manager_gpu $(( ${W11_SECONDS:-290} - SECONDS ))
exit $rc

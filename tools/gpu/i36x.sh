#!/usr/bin/env bash
# Issue 36, item 4, candidates (branch h7): benchmarks/bench_i36x.py on the GPU in one run. Every variant (cuda:
# today's kernel sources with -D defines chosen by the benchmark, some with their own grid; Triton: other
# launch shapes) is first checked byte for byte against torch_ref on random inputs (plan, scatter, decode and
# multi-token writes), then timed from CUDA graphs beside today's kernel and the floor (plan: the stream
# probe; scatter: its bytes at copy bandwidth; writes: the dependent-load probe). Sections run one at a time
# so that one that runs out of time leaves the others' figures. Under 4 minutes on an H100 (cold caches).
# Run through the session driver, which installs the wheels and sets PYTHONPATH:
#   PHASE_SECONDS=300 ./tools/gpu_session.sh i36x
set -u
mkdir -p "$OUT"
rc=0
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
for spec in scatter:45 write:125 plan:70; do
    section=${spec%%:*}
    timeout "${spec##*:}" python3 benchmarks/bench_i36x.py --only $section --out "$OUT/bench_i36x_$section.json" \
        >"$OUT/bench_i36x_$section.log" 2>&1
    r=$?; rc=$((rc | r))
    echo "bench_i36x $section: rc=$r"
    grep -E "^parity .*FAIL" "$OUT/bench_i36x_$section.log" | cut -c1-200
    sed -n '/^== /,$p' "$OUT/bench_i36x_$section.log" | cut -c1-170 | head -60
    [ $r -ne 0 ] && tail -5 "$OUT/bench_i36x_$section.log"
done
exit $rc

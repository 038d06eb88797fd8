#!/usr/bin/env bash
# Wave 3, session 6, GPU call 2 of 2 (right after wave3t, on the same machine): the figures. The budgeted
# forward per node group (budget_nodes) and bench_fast_step's bs 64 x 2048 case after the one staging cat; the
# cuda write's candidate kernels side by side beside their probes (bench_write_variants); bench_engine (the
# journal's share with the one-event-per-block feed); each of the manager's phases as the engine's queue leaves it
# and after a device sync (profile_phases --drain-rounds) with the pinned inputs and the TAIL read-back.
set -u
mkdir -p "$OUT"
source "$(dirname "$0")/step.sh"  # rc and step
python3 -c "import torch; print(torch.cuda.get_device_name(), torch.__version__)"
step budget_nodes 80 python3 benchmarks/budget_nodes.py --device cuda --out "$OUT/budget_nodes.json"
sed -n '/^== budget_nodes/,$p' "$OUT/budget_nodes.log" | cut -c1-150 | head -40
step bench_fast_step 70 python3 benchmarks/bench_fast_step.py --device cuda --quick --out "$OUT/bench_fast_step.json"
sed -n '/^== bench_fast_step/,$p' "$OUT/bench_fast_step.log" | grep -E "canary device (time|share of the step,)|alone|host" \
    | cut -c1-150
step bench_write_variants 60 python3 benchmarks/bench_write_variants.py --out "$OUT/bench_write_variants.json"
sed -n '/^== /,$p' "$OUT/bench_write_variants.log" | cut -c1-170 | head -90
step bench_engine 110 python3 benchmarks/bench_engine.py --device cuda --out "$OUT/bench_engine.json"
grep -iE "journal|engine_step" "$OUT/bench_engine.log" | tail -12 | cut -c1-170
step drain ${DRAIN_SECS:-95} python3 benchmarks/profile_phases.py --drain-rounds 2 --profilers none --new-tokens 80 \
    --first 30 --count 44
grep -A6 "median host time" "$OUT/drain.log"
exit $rc

#!/usr/bin/env bash
# Wave 3, session 4, second GPU call: the demo engine's steady steps and its journal share before and after
# (bench_engine), bench_compile before and after, the Triton plan's token-pool candidates (bench_i36k), then where the manager's host time goes inside transformers:
# one round of bench_transformers under cProfile (its figures are not reported; the profile's shares are).
set -u
mkdir -p "$OUT"
BUDGET=200 BENCHES="bench_engine bench_compile" OUT="$OUT/pairs" bash tools/gpu/suite.sh
grep -iE "journal|share|step" "$OUT/pairs/after/bench_engine.log" | cut -c1-160 | tail -14
timeout 90 python3 benchmarks/bench_i36k.py --only plan --rounds 5 --out "$OUT/bench_i36k_pool.json" \
    >"$OUT/bench_i36k_pool.log" 2>&1; echo "bench_i36k plan: rc=$?"
grep -E "token pool|/ after" "$OUT/bench_i36k_pool.log" | cut -c1-150 | head -20
timeout 60 python3 tools/triton_resources.py --plan >"$OUT/plan_regs.log" 2>&1; echo "plan registers: rc=$?"
timeout 90 python3 -m pytest tests/backends/triton/test_plan_pool_variants.py -o addopts="" -x -q -p no:cacheprovider \
    >"$OUT/pool_variants.log" 2>&1; echo "pool variants: rc=$? $(tail -1 "$OUT/pool_variants.log")"
python3 benchmarks/bench_manager_graphs.py --device cuda --out "$OUT/bench_manager_graphs.json" \
    >"$OUT/bench_manager_graphs.log" 2>&1; echo "bench_manager_graphs: rc=$?"
t0=$SECONDS
timeout $((540 - SECONDS)) python3 -m cProfile -o "$OUT/bench_transformers.prof" benchmarks/bench_transformers.py \
    --device cuda --rounds 1 >"$OUT/profile.log" 2>&1
echo "profile: rc=$? in $((SECONDS - t0)) s"
python3 - "$OUT/bench_transformers.prof" >"$OUT/profile.txt" 2>&1 <<'PY'
import pstats, sys
st = pstats.Stats(sys.argv[1])
for name in ("end_step", "head", "tail", "batch", "prepare", "_collect", "tail"):
    print(f"=== callees of {name}")
    st.sort_stats("cumulative").print_callees(rf"\({name}\)")
st.sort_stats("tottime").print_stats(60)
PY
head -c 3000 "$OUT/profile.txt"

"""The cuda write's candidate kernels side by side: decode-shaped writes, each variant beside its floor probe.

``KVC_WRITE_VARIANT`` (``backends/cuda/write.py``, ``kernels/write.cu`` says what each bit changes) builds the
write kernel with the lean decode chain (bit 1), the fold's early strips (bit 2), with those the one-token fold
(bit 4), or several; variant 0 is the kernel before them (what launches with more tokens than request rows run,
``write.variant_for``). The cases are bench_decode_write's: ``bs`` one-token requests continuing their chains
(bs 1, 8, 64, 256, 1024), real-KV off and PARTIAL over 1, 2 and 4 sources, each launch replayed from a CUDA
graph. Beside each figure its floor from the same run (benchmarks/floors_cuda.py): the two-dependent-load probe
with real-KV off (goal 2x), the probe plus each source's strip at the loaded slot with PARTIAL (a third dependent
round, goal 1.5x). The variants are timed in turn, then again in the reverse order (the lower of the two is kept), so
that a drift of the card's clock does not favour one.

Before timing, every variant runs once from the same starting state as the backend's own launch: the canary
buffer, the violation rows (as a multiset), the write index and the counters must equal the backend's, or the
run fails at the end (after writing its figures).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks import floors_cuda as fc
from benchmarks import timing
from benchmarks.bench_decode_write import DEV, STRIP, sources
from benchmarks.report import Report, machine
from kvcanary.context import VerifyOrWriteContext
from kvcanary.ops.write import WriteLaunch
from kvcanary.testing import builders
from kvcanary_backends.cuda import write
from tools import workloads

BS = (1, 8, 64, 256, 1024)
NSRC = (0, 1, 2, 4)
GOAL_OFF = 2.0  # real-KV off: at most 2x the two-load probe
GOAL_PARTIAL = 1.5  # PARTIAL: at most 1.5x the probe with its strips


def _state(ctx: VerifyOrWriteContext) -> dict[str, torch.Tensor]:
    return {"canary_buf": ctx.canary_buf, "violation_ring": ctx.violation_ring,
            "violation_write_index": ctx.violation_write_index, "slot_run_counter": ctx.slot_run_counter,
            "kernel_run_counter": ctx.kernel_run_counter}


def _outputs(ctx: VerifyOrWriteContext, run: Callable[[], None], start: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What ``run`` leaves from the ``start`` state (restored first): tensors on the host, the violation rows
    sorted (a parallel kernel appends them in any order)."""
    for name, t in _state(ctx).items():
        t.copy_(start[name])
    run()
    torch.cuda.synchronize()
    out: dict[str, Any] = {k: v.detach().cpu().clone() for k, v in _state(ctx).items()}
    rows = out.pop("violation_ring")
    out["violation_rows"] = sorted(tuple(r) for r in rows.tolist() if any(r))
    return out


def _differences(got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    bad = []
    for k, w in want.items():
        g = got[k]
        same = torch.equal(g, w) if isinstance(w, torch.Tensor) else g == w
        if not same:
            bad.append(k)
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default=None, help="write the records here")
    ap.add_argument("--variants", default=",".join(str(v) for v in write.VARIANTS),
                    help=f"comma-separated KVC_WRITE_VARIANT values to time, of {write.VARIANTS} (0: the kernel "
                    "before the candidates)")
    ap.add_argument("--bs", default=",".join(str(b) for b in BS), help="comma-separated batch sizes")
    ap.add_argument("--sources", default=",".join(str(n) for n in NSRC),
                    help="comma-separated source counts (0: real-KV off, else PARTIAL)")
    args = ap.parse_args()
    variants = [int(v) for v in args.variants.split(",") if v]
    bad = [v for v in variants if v not in write.VARIANTS]
    if bad:
        sys.exit(f"bench_write_variants: --variants: each one of {write.VARIANTS}, not {bad}")
    if 0 not in variants:
        variants.insert(0, 0)  # every ratio between variants is to today's kernel
    if not torch.cuda.is_available():
        print("bench_write_variants: needs a CUDA device", file=sys.stderr)
        return
    r = Report("bench_write_variants", machine(DEV))
    r.note(f"decode-shaped launches' variant (write.DECODE_VARIANT): {write.DECODE_VARIANT}; timed: {variants}")
    failures: list[str] = []
    for bs in (int(b) for b in args.bs.split(",") if b):
        num_slots = 4 * bs + 64
        locs = torch.randperm(num_slots - 1, device=DEV) + 1
        probe = None
        for nsrc in (int(n) for n in args.sources.split(",") if n):
            mode = kc.RealKvHashMode.NONE if nsrc == 0 else kc.RealKvHashMode.PARTIAL
            label = "real-KV off" if nsrc == 0 else f"PARTIAL, {nsrc} source{'s' if nsrc > 1 else ''}"
            ctx = builders.context(DEV, num_slots=num_slots, sources=sources(num_slots, nsrc), mode=mode)
            kw = workloads.decode_writes(ctx, locs[bs : 2 * bs], locs[:bs], backend="cuda")
            plan = kw["plan"]
            recs = ctx.canary_buf.view(torch.int64)
            if probe is None:
                probe = fc.dependent_loads_cuda(plan.write_offsets, plan.write_seed_slot_indices, kw["input_ids"],
                                                kw["out_cache_loc"], recs, warps_per_block=write.WARPS)
                r.add(f"bs={bs}: dependent-load probe", probe, None, note="two dependent loads and a store")
            floor, goal = probe, GOAL_OFF
            if nsrc:
                floor = fc.dependent_loads_kv_cuda(
                    plan.write_offsets, plan.write_seed_slot_indices, kw["input_ids"], kw["out_cache_loc"], recs,
                    [src.tensor for src in ctx.real_kv_sources], stride=STRIP, warps_per_block=write.WARPS)
                goal = GOAL_PARTIAL
                r.add(f"bs={bs}: dependent-load probe + {nsrc} strip{'s' if nsrc > 1 else ''}", floor, probe,
                      note="floor of PARTIAL: each source's strip at the loaded slot, a third round")
            call = WriteLaunch(**kw)
            launches = {v: write.prepare_variant(call, v) for v in variants}
            start = {k: t.clone() for k, t in _state(ctx).items()}
            want = _outputs(ctx, partial(kc.launch_canary_write_kernel, **kw, backend="cuda"), start)
            for v, run in launches.items():
                diff = _differences(_outputs(ctx, run, start), want)
                if diff:
                    failures.append(f"bs={bs}, {label}, variant {v}: {', '.join(diff)} differ from the backend's")
            times: dict[int, float] = {}
            for order in (variants, variants[::-1]):
                for v in order:
                    t = timing.graph(launches[v], rounds=100)
                    times[v] = min(t, times.get(v, t))
            for v in variants:
                r.add(f"bs={bs} x 1, {label} [cuda variant {v}, graph]", times[v], floor, target=goal,
                      note="floor: the probe with its strips" if nsrc else "floor: the dependent-load probe")
            for v in variants:
                if v:
                    r.value(f"bs={bs} x 1, {label}: variant {v} / variant 0", times[v] / times[0], 1.0, unit="x")
    r.write(args.out)
    if failures:
        sys.exit("bench_write_variants: records differ:\n" + "\n".join(failures))


if __name__ == "__main__":
    main()

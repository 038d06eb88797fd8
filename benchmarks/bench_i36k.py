"""Issue 36, item 4: the changed kernels before and after, side by side in one run, beside their floors.

Every figure is GPU time per launch replayed from a CUDA graph; the variants of a case are timed in turn,
``--rounds`` times, and each keeps its median, so that clocks and the other variants' cache traffic treat
them alike.

- Triton plan, bs = 256 x 4096 (1 Mi entries; also x 4000: partial last tiles; and with the token pool), 4
  rotating sets: *before* (``benchmarks/before/triton_plan.py``: stores masked to the capacity too, limb
  sums), *limb sums* (today's kernel with the scan forced onto its limb path: the mask change alone),
  *after* (today's default, the clamped scan), and *after* with 4 warps a program or tiles of 2048 entries
  (launch shapes whose grid would be resident in one wave: candidates, timed only), and the candidates of each
  specialization (``POOL_CANDIDATES`` with the token pool, ``PLAIN_CANDIDATES`` without: fewer registers, more
  resident programs; timed only). Floors: the plan's bytes at copy bandwidth and the plain stream probe
  (``floors_cuda.plan_stream_cuda``); target: 19 us at 256 x 4096.
- cuda plan (same sets) beside the same stream probe, target 1.25x (unchanged: the issue's figure, same run);
  cuda scatter 256 x 4096 before (``benchmarks/before/scatter.cu``: the later-request search before any load)
  and after, and Triton's, beside its bytes at copy bandwidth, target 1.5x.
- decode writes, bs 1, 8, 64, 256, 1024 one-token requests, real-KV off and PARTIAL over 2 sources: cuda,
  Triton *before* (``benchmarks/before/triton_write.py``: fold tile 256, second-round loads inside the
  branches), *after* (the decode-shaped fold tile and the early loads) and, with sources, *after* with the
  256-token tile (the early loads alone), beside the dependent-load probe; targets: cuda PARTIAL <= 1.5x
  the probe, Triton <= 1.3x cuda.

Usage (repository root, a CUDA GPU)::

    python benchmarks/bench_i36k.py --out results/bench_i36k.json [--only plan,scatter,write]
    TRITON_INTERPRET=1 python benchmarks/bench_i36k.py --dry-run    # CPU: the plan variants agree, tiny
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks import floors, timing
from benchmarks.before import triton_plan as before_plan
from benchmarks.before import triton_write as before_write
from benchmarks.report import Report, machine
from kvcanary.ops.plan import PlanLaunch
from kvcanary.ops.write import WriteLaunch
from kvcanary.testing import builders
from kvcanary_backends.triton import plan as triton_plan
from kvcanary_backends.triton._jit import TUNING
from tools import workloads

if "triton" not in kc.registered_backends():  # a checkout that is not pip-installed has no entry-point metadata
    from kvcanary_backends.triton import BACKEND as _TRITON

    kc.register_backend(_TRITON)

Fn = Callable[[], None]
SECTIONS = ("plan", "scatter", "write")
PLAN_TARGET_US = 19.0
#: the token-pool alternatives of today's Triton plan, each a change of TUNING (tools/triton_resources.py --plan
#: prints their registers). The default keeps the capacity test on the pool's tile stores (plan_pool_cap_mask);
#: timed beside it: the tile stores without that test (the round-4 kernel), the tokens gathered after the other
#: stores, and a register cap of 64 a thread (4 programs of 8 warps an SM)
POOL_CANDIDATES: dict[str, dict[str, int]] = {
    "pool without the cap mask": {"plan_pool_cap_mask": 0},
    "pool cap mask + token last": {"plan_pool_cap_mask": 1, "plan_pool_token_last": 1},
    "pool 64 registers": {"plan_pool_cap_mask": 0, "plan_pool_max_registers": 64},
}
#: the same register cap for the plan without the token pool (its own specialization, its own key)
PLAIN_CANDIDATES: dict[str, dict[str, int]] = {"64 registers": {"plan_max_registers": 64}}
STRIP = 256  # bytes of K (or V) per token in every decode-write source


@contextmanager
def limb_scan() -> Iterator[None]:
    """Today's Triton plan with its row scan on the limb path (the host's choice replaced while inside)."""
    choose = triton_plan.limb_sums
    triton_plan.limb_sums = lambda capacity, chunk: True
    try:
        yield
    finally:
        triton_plan.limb_sums = choose


@contextmanager
def tuned(**over: int) -> Iterator[None]:
    """Triton's launch shapes (``TUNING``) with ``over`` while inside."""
    keep = {k: TUNING[k] for k in over}
    TUNING.update(over)
    try:
        yield
    finally:
        TUNING.update(keep)


def _under(ctx: Callable[[], Any], fn: Fn) -> Fn:
    def run() -> None:
        with ctx():
            fn()

    return run


def plan_variants(batch: workloads.PlanBatch, *, pool: bool) -> dict[str, list[Fn]]:
    """The Triton plan's three variants and cuda's plan, each over every set of ``batch``."""
    kws = [batch.kwargs(i, pool=pool) for i in range(len(batch.vps))]
    after: list[Fn] = [partial(kc.launch_canary_plan_kernels, **kw, backend="triton") for kw in kws]
    out: dict[str, list[Fn]] = {"triton before": [partial(before_plan.plan, PlanLaunch(**kw)) for kw in kws],
           "triton limb sums": [_under(limb_scan, f) for f in after],
           "triton after": after,
           # launch shapes that would fit the grid at 256 x 4096 in one wave of resident programs
           # (tools/triton_resources.py --plan): candidates for TUNING, timed only
           "triton after, 4 warps": [_under(partial(tuned, plan_warps=4), f) for f in after],
           "triton after, tile 2048": [_under(partial(tuned, plan_tile=2048), f) for f in after]}
    # candidates of the specialization timed (TUNING's plan_pool_* keys with the token pool, plan_max_registers
    # without): registers, hence resident programs
    for name, over in (POOL_CANDIDATES if pool else PLAIN_CANDIDATES).items():
        out[f"triton after, {name}"] = [_under(partial(tuned, **over), f) for f in after]
    if batch.vps[0].verify_slot_indices.device.type == "cuda":
        out["cuda"] = [partial(kc.launch_canary_plan_kernels, **kw, backend="cuda") for kw in kws]
    return out


def side_by_side(variants: Mapping[str, Sequence[Fn]], rounds: int) -> dict[str, float]:
    """Median over ``rounds`` of each variant's graph time per launch, the variants timed in turn."""
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for k, fns in variants.items():
            times[k].append(timing.graph(list(fns)))
    return {k: statistics.median(v) for k, v in times.items()}


def _fresh(outputs: list[torch.Tensor], fn: Fn) -> list[torch.Tensor]:
    """``outputs`` after ``fn`` from -7 everywhere (what a launch leaves alone stays -7 for every variant)."""
    for t in outputs:
        t.fill_(-7)
    fn()
    return [t.clone() for t in outputs]


def dry_run() -> int:
    """CPU (the interpreter) or GPU: one small batch, every Triton plan variant leaves torch_ref's plan."""
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for pool in (False, True):
        batch = workloads.PlanBatch(5, 37, sets=1, device=dev, pools=pool, num_slots=4096)
        outputs = [t for t in (*vars(batch.vps[0]).values(), *vars(batch.wps[0]).values())
                   if isinstance(t, torch.Tensor)]
        want = _fresh(outputs, partial(kc.launch_canary_plan_kernels, **batch.kwargs(0, pool=pool),
                                       backend="torch_ref"))
        for name, fns in plan_variants(batch, pool=pool).items():
            if any(not torch.equal(a, b) for a, b in zip(_fresh(outputs, fns[0]), want, strict=True)):
                print(f"bench_i36k --dry-run: plan {name} (pool {pool}) differs from torch_ref", file=sys.stderr)
                return 1
    print("bench_i36k --dry-run: every plan variant leaves torch_ref's plan")
    for nsrc in (0, 2):  # the write's variants: torch_ref's records from the same starting buffer
        mode = kc.RealKvHashMode.NONE if nsrc == 0 else kc.RealKvHashMode.PARTIAL
        ctx = builders.context(dev, num_slots=64, sources=_sources(64, nsrc, dev), mode=mode)
        locs = torch.randperm(63, device=dev) + 1
        kw = workloads.decode_writes(ctx, locs[8:16], locs[:8], backend="torch_ref")
        start = ctx.canary_buf.clone()
        records = {}
        for name, fn in (("torch_ref", partial(kc.launch_canary_write_kernel, **kw, backend="torch_ref")),
                         ("triton after", partial(kc.launch_canary_write_kernel, **kw, backend="triton")),
                         ("triton before", partial(before_write.write, WriteLaunch(**kw)))):
            ctx.canary_buf.copy_(start)
            fn()
            records[name] = ctx.canary_buf.clone()
        if any(not torch.equal(v, records["torch_ref"]) for v in records.values()):
            print(f"bench_i36k --dry-run: a write variant ({nsrc} sources) differs from torch_ref", file=sys.stderr)
            return 1
    print("bench_i36k --dry-run: every write variant leaves torch_ref's records")
    return 0


def bench_plan(r: Report, copy_bw: float, rounds: int) -> None:
    from benchmarks import floors_cuda as fc

    dev = torch.device("cuda")
    for prefix, pool in ((4096, False), (4096, True), (4000, False)):
        batch = workloads.PlanBatch(256, prefix, sets=4, device=dev, pools=pool)
        n = batch.entries
        per_entry = 36 + (4 if pool else 0)
        nbytes = n * per_entry + batch.bs * (48 + (8 if pool else 0)) + 16
        label = f"plan 256 x {prefix}{' + token pool' if pool else ''}"
        times = side_by_side(plan_variants(batch, pool=pool), rounds)
        torch.cuda.synchronize()
        assert int(batch.vps[0].enable[0]) == 1 and int(batch.vps[0].verify_num_valid[0]) == n
        streams = fc.plan_stream_cuda(n, 4) if not pool else {}
        stream = min(streams.values()) if streams else None
        for name, t in times.items():
            target = PLAN_TARGET_US / (nbytes / copy_bw * 1e6) if name == "triton after" and prefix == 4096 \
                and not pool else None
            r.add(f"{label}: {name}", t, nbytes / copy_bw, target=target, benchmark="i36 plan",
                  note=f"floor: {nbytes / 2**20:.1f} MiB at copy bandwidth"
                       + (f"; target {PLAN_TARGET_US} us" if target else ""))
            if stream is not None and name in ("cuda", "triton after"):
                r.add(f"{label}: {name} vs the stream probe", t, stream, benchmark="i36 plan",
                      target=1.25 if name == "cuda" else None, note="floor: kvc_probe_stream_plan, same rotation")
        r.value(f"{label}: triton after / before", times["triton after"] / times["triton before"], None, unit="x",
                benchmark="i36 plan")
        for name in (f"triton after, {c}" for c in (*POOL_CANDIDATES, *PLAIN_CANDIDATES)):
            if name in times:
                r.value(f"{label}: {name} / after", times[name] / times["triton after"], None, unit="x",
                        benchmark="i36 plan")
        del batch
        torch.cuda.empty_cache()


def scatter_before(kw: dict[str, Any]) -> Fn:
    """The cuda scatter before issue 36 (``benchmarks/before/scatter.cu``), launched as the backend launches it."""
    from kvcanary_backends.cuda import scatter
    from kvcanary_backends.cuda._toolchain import Spec, launch, load

    dev = torch.cuda.current_device()
    kernel = load(Spec("scatter.cu", "kvc_scatter_before", (), scatter.THREADS,
                       extra_include=str(Path(__file__).resolve().parent / "before")), dev)
    flat, offsets, rpi, pool = kw["flat_in"], kw["offsets"], kw["req_pool_indices"], kw["pool_out"]
    bs, ntok, (rows, cols) = rpi.shape[0], flat.shape[0], pool.shape
    shape = scatter.shape((), (bs, ntok, rows, cols), 0)
    assert shape is not None
    args = (flat.data_ptr(), ntok, offsets.data_ptr(), rpi.data_ptr(), bs, pool.data_ptr(), rows, cols)
    return partial(launch, kernel, dev, shape, args)


def bench_scatter(r: Report, copy_bw: float, rounds: int) -> None:
    bs, per = 256, 4096
    sets = workloads.scatter_sets(bs, per, 4, torch.device("cuda"))
    variants: dict[str, list[Fn]] = {b: [partial(kc.launch_scatter_req_token_ids_kernel, **kw, backend=b)
                                         for kw in sets] for b in ("cuda", "triton")}
    before = [scatter_before(kw) for kw in sets]
    same = True
    for fn, kw in zip(before, sets, strict=True):  # the old kernel leaves the pool the current one leaves
        kw["pool_out"].zero_()
        kc.launch_scatter_req_token_ids_kernel(**kw, backend="cuda")
        want = kw["pool_out"].clone()
        kw["pool_out"].zero_()
        fn()
        same = same and torch.equal(kw["pool_out"], want)
    if same:
        variants["cuda before"] = before
    else:
        r.note("cuda scatter before: its pool rows differ from the current kernel's; not timed")
    floor = bs * per * 12 / copy_bw
    for name, t in side_by_side(variants, rounds).items():
        r.add(f"scatter {bs} x {per}: {name}", t, floor, target=1.5 if name == "cuda" else None,
              benchmark="i36 scatter", note="floor: 8 B read + 4 B written per token at copy bandwidth, 4 sets")


def _sources(num_slots: int, count: int, dev: torch.device) -> tuple[kc.RealKvSource, ...]:
    """``count`` sources alternating token-major and paged by 16 (as bench_decode_write's)."""
    g = torch.Generator(device=dev).manual_seed(count)
    out = []
    for i in range(count):
        page = 1 if i % 2 == 0 else 16
        data = torch.randint(0, 256, (-(-num_slots // page), page * STRIP), dtype=torch.uint8, device=dev,
                             generator=g)
        out.append(kc.RealKvSource(tensor=data, page_size=page, num_bytes_per_token=STRIP, read_bytes=STRIP))
    return tuple(out)


def bench_write(r: Report, rounds: int) -> None:
    from benchmarks import floors_cuda as fc
    from kvcanary_backends.cuda.write import WARPS

    dev = torch.device("cuda")
    wide = TUNING["write_fold_tile"]
    for bs in (1, 8, 64, 256, 1024):
        num_slots = 4 * bs + 64
        locs = torch.randperm(num_slots - 1, device=dev) + 1
        probe = None
        for nsrc in (0, 2):
            mode = kc.RealKvHashMode.NONE if nsrc == 0 else kc.RealKvHashMode.PARTIAL
            label = f"write bs={bs} x 1, {'real-KV off' if nsrc == 0 else 'PARTIAL, 2 sources'}"
            ctx = builders.context(dev, num_slots=num_slots, sources=_sources(num_slots, nsrc, dev), mode=mode)
            kw = workloads.decode_writes(ctx, locs[bs : 2 * bs], locs[:bs], backend="cuda")
            if probe is None:
                plan = kw["plan"]
                probe = fc.dependent_loads_cuda(plan.write_offsets, plan.write_seed_slot_indices, kw["input_ids"],
                                                kw["out_cache_loc"], ctx.canary_buf.view(torch.int64),
                                                warps_per_block=WARPS)
                r.add(f"bs={bs}: dependent-load probe", probe, None, benchmark="i36 write",
                      note="two dependent loads and a store")
            cuda = partial(kc.launch_canary_write_kernel, **kw, backend="cuda")
            tri = partial(kc.launch_canary_write_kernel, **kw, backend="triton")
            variants: dict[str, list[Fn]] = {"cuda": [cuda], "triton after": [tri],
                                              "triton before": [partial(before_write.write, WriteLaunch(**kw))]}
            if nsrc:  # the early loads alone, with the wide fold tile (in fold programs: no chain fold)
                variants["triton after, tile 256"] = [_under(partial(tuned, write_fold_tile_decode=wide,
                                                                     write_chain_fold=0), tri)]
            times = side_by_side(variants, rounds)
            for name, t in times.items():
                r.add(f"{label}: {name}", t, probe, benchmark="i36 write",
                      target=1.5 if name == "cuda" and nsrc else None, note="floor: the dependent-load probe")
            for name in ("triton after", "triton before", "triton after, tile 256"):
                if name in times:
                    r.value(f"{label}: {name} / cuda", times[name] / times["cuda"], None, unit="x",
                            target=1.3 if name == "triton after" else None, benchmark="i36 write")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the records here (details go to raw/ beside it)")
    ap.add_argument("--dry-run", action="store_true", help="the plan variants against torch_ref, tiny, untimed")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    ap.add_argument("--rounds", type=int, default=3, help="timings of each variant, in turn (median kept)")
    a = ap.parse_args()
    if a.dry_run:
        return dry_run()
    if not torch.cuda.is_available():
        print("bench_i36k: needs a CUDA device (or --dry-run)", file=sys.stderr)
        return 2
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    if only - set(SECTIONS):
        print(f"bench_i36k: unknown sections {sorted(only - set(SECTIONS))}", file=sys.stderr)
        return 2
    import triton

    dev = torch.device("cuda")
    torch.manual_seed(0)
    r = Report("i36 kernels", machine(dev, f"triton {triton.__version__}"))
    r.details["tuning"] = dict(TUNING)
    copy_bw = floors.copy_bandwidth(dev)
    r.floor("copy bandwidth (B/s, read + written)", copy_bw, "device-to-device copy")
    if "plan" in only:
        bench_plan(r, copy_bw, a.rounds)
    if "scatter" in only:
        bench_scatter(r, copy_bw, a.rounds)
    if "write" in only:
        bench_write(r, a.rounds)
    r.write(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

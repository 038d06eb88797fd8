"""Issue 36, item 4, candidates: kernel variants beside today's kernels and their floors, after a parity check.

Each cuda variant is today's kernel source with a few ``-D`` defines (and, where the variant needs it, its own
launch grid), chosen here and nowhere else: the product's launchers never see them. Triton variants are
today's kernels with other launch shapes (``TUNING`` overrides). For every variant:

1. parity: the variant's outputs on random inputs (several shapes, hostile-ish values: padding rows, odd
   starts, duplicate rows, overflowing capacities, skipped tokens) equal torch_ref's byte for byte; a variant
   that differs is reported and not timed;
2. timing: GPU time per launch replayed from CUDA graphs (bench_i36k's harness: the variants of a case timed
   in turn, ``--rounds`` times, medians), beside today's kernel and the case's floor.

Cases: plan 256 x 4096 (4 rotating sets) beside the stream probe (goal 1.25x); scatter 256 x 4096 beside its
bytes at copy bandwidth (goal 1.5x); decode writes PARTIAL x 2 sources at bs 1, 8, 64, 256, 1024 beside the
dependent-load probe (goal cuda 1.5x, Triton 1.3x cuda).

Usage (repository root, a CUDA GPU)::

    python benchmarks/bench_i36x.py --out results/bench_i36x.json [--only plan,scatter,write] [--no-time]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks.bench_i36k import SECTIONS, _sources, side_by_side, tuned
from benchmarks.report import Report, machine
from kvcanary.ops.plan import PlanLaunch
from kvcanary.ops.scatter import ScatterLaunch
from kvcanary.ops.write import WriteLaunch
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.testing import builders
from kvcanary_backends.cuda import plan as cplan
from kvcanary_backends.cuda import plan_entries as cpe
from kvcanary_backends.cuda import scatter as cscatter
from kvcanary_backends.cuda import write as cwrite
from kvcanary_backends.cuda._toolchain import Compiled, Spec, cdiv, launch, load
from tools import workloads

Fn = Callable[[], None]
Kw = dict[str, Any]
Maker = Callable[[Kw], Fn]  # a variant: the launch arguments -> a launch of it
Defines = tuple[tuple[str, int], ...]


# -- cuda variants: today's source, other defines, maybe another grid -----------------------------------------
def _spec(base: Spec, extra: Defines) -> Spec:
    d = dict(base.defines)
    d.update(extra)
    return Spec(base.source, base.entry, tuple(d.items()), base.threads, base.extra_include)


def cuda_variant(module: Any, contract: Any, extra: Defines,
                 grid: Callable[[Any, Any, Compiled], tuple[int, int, int, int] | None] | None = None) -> Maker:
    """A launch of ``module``'s kernel (its pack) compiled with ``extra`` defines, on ``grid(key, sizes,
    compiled)`` (default: the module's own shape)."""

    def make(kw: Kw) -> Fn:
        key, sizes, args = module.pack(contract(**kw))
        spec = _spec(module.KERNELS.spec(*key), extra)
        if not torch.cuda.is_available():  # --emulate: the kernel built for the host (tests' emulation)
            from tests.backends.cuda import _emu

            fake: Any = SimpleNamespace(max_blocks=_emu.MAX_BLOCKS)
            s = grid(key, sizes, fake) if grid is not None else module.shape(key, sizes, fake.max_blocks)
            return (lambda: None) if s is None else partial(_emu.build(spec).launch, s, args)
        dev = torch.cuda.current_device()
        k = load(spec, dev)
        s = grid(key, sizes, k) if grid is not None else module.shape(key, sizes, k.max_blocks)
        if s is None:
            return lambda: None
        return partial(launch, k, dev, s, args)

    return make


def backend(launcher: Callable[..., None], name: str, ctx: Callable[[], Any] | None = None) -> Maker:
    """Today's launcher on ``name`` (inside ``ctx()`` while it runs: a Triton launch-shape override)."""

    def make(kw: Kw) -> Fn:
        fn = partial(launcher, **kw, backend=name)
        if ctx is None:
            return fn

        def run() -> None:
            with ctx():
                fn()

        return run

    return make


def plan_grid(ept: int, full: bool = False) -> Callable[[Any, Any, Compiled], tuple[int, int, int, int]]:
    """The fused plan's grid for tiles of 256 x ``ept`` entries (``full``: every tile a block, not only the
    resident ones)."""

    def grid(key: Any, sizes: tuple[int, int], k: Compiled) -> tuple[int, int, int, int]:
        bs, cap = sizes
        tiles = cdiv(cap, cpe.THREADS * ept) + bs
        n = tiles if full else min(tiles, k.max_blocks - 1)
        return 1 + max(1, n), 1, cpe.THREADS, cpe.shared_bytes(bs)

    return grid


def scatter_grid(cols_per_block: int) -> Callable[[Any, Any, Compiled], tuple[int, int, int, int] | None]:
    """The scatter's grid with ``cols_per_block`` columns a block (today: 1024)."""

    def grid(key: Any, sizes: tuple[int, int, int, int], k: Compiled) -> tuple[int, int, int, int] | None:
        bs, ntok, rows, cols = sizes
        if bs == 0 or ntok == 0 or rows == 0 or cols == 0:
            return None
        want = cdiv(min(cols, ntok), cols_per_block)
        return bs, max(1, min(want, max(1, 8192 // max(bs, 1)), 65535)), cscatter.THREADS, 0

    return grid


def plan_variants() -> dict[str, Maker]:
    v = partial(cuda_variant, cplan, PlanLaunch)
    return {
        "cuda": backend(kc.launch_canary_plan_kernels, "cuda"),
        "cuda stcs": v((("KVC_PLAN_STCS", 1),), plan_grid(4)),
        "cuda minb5": v((("KVC_PLAN_MIN_BLOCKS", 5),), plan_grid(4)),
        "cuda stcs minb5": v((("KVC_PLAN_STCS", 1), ("KVC_PLAN_MIN_BLOCKS", 5)), plan_grid(4)),
        "cuda ept8": v((("KVC_PLAN_EPT", 8),), plan_grid(8)),
        "cuda stcs ept8": v((("KVC_PLAN_STCS", 1), ("KVC_PLAN_EPT", 8)), plan_grid(8)),
        "cuda ept16": v((("KVC_PLAN_EPT", 16),), plan_grid(16)),
        "cuda prefetch": v((("KVC_PLAN_PREFETCH", 1),), plan_grid(4)),
        "cuda stcs prefetch": v((("KVC_PLAN_STCS", 1), ("KVC_PLAN_PREFETCH", 1)), plan_grid(4)),
        "cuda grid full": v((), plan_grid(4, full=True)),
        "cuda stcs grid full": v((("KVC_PLAN_STCS", 1),), plan_grid(4, full=True)),
    }


def scatter_variants() -> dict[str, Maker]:
    v = partial(cuda_variant, cscatter, ScatterLaunch)
    return {
        "cuda": backend(kc.launch_scatter_req_token_ids_kernel, "cuda"),
        "cuda cs": v((("KVC_SCATTER_CS", 1),), scatter_grid(1024)),
        "cuda u8": v((("KVC_SCATTER_U", 8),), scatter_grid(2048)),
        "cuda vec u2": v((("KVC_SCATTER_VEC", 1), ("KVC_SCATTER_U", 2)), scatter_grid(1024)),
        "cuda vec u4": v((("KVC_SCATTER_VEC", 1), ("KVC_SCATTER_U", 4)), scatter_grid(2048)),
        "cuda vec u4 cs": v((("KVC_SCATTER_VEC", 1), ("KVC_SCATTER_U", 4), ("KVC_SCATTER_CS", 1)),
                            scatter_grid(2048)),
        "cuda vec u8": v((("KVC_SCATTER_VEC", 1), ("KVC_SCATTER_U", 8)), scatter_grid(4096)),
        "cuda vec u2 cs": v((("KVC_SCATTER_VEC", 1), ("KVC_SCATTER_U", 2), ("KVC_SCATTER_CS", 1)),
                            scatter_grid(1024)),
    }


def write_variants() -> dict[str, Maker]:
    v = partial(cuda_variant, cwrite, WriteLaunch)
    w = kc.launch_canary_write_kernel
    return {
        "cuda": backend(w, "cuda"),
        "cuda guess": v((("KVC_WRITE_GUESS", 1),)),
        "triton": backend(w, "triton"),
        "triton warps 2": backend(w, "triton", partial(tuned, write_warps=2)),
        "triton warps 4": backend(w, "triton", partial(tuned, write_warps=4)),
        "triton fold tile 16": backend(w, "triton", partial(tuned, write_fold_tile_decode=16)),
        "triton fold tile 64": backend(w, "triton", partial(tuned, write_fold_tile_decode=64)),
    }


# -- parity against torch_ref ---------------------------------------------------------------------------------
def _outputs_after(outs: Sequence[torch.Tensor], fn: Fn, start: Sequence[torch.Tensor] | None = None
                   ) -> list[torch.Tensor]:
    """``outs`` after ``fn`` from ``start`` (default -7 everywhere)."""
    for i, t in enumerate(outs):
        if start is None:
            t.fill_(-7)
        else:
            t.copy_(start[i])
    fn()
    return [t.clone() for t in outs]


def plan_cases(dev: torch.device) -> list[tuple[str, Kw]]:
    """Random fused plans: padding rows, rows of length 0, uneven lengths, SWA windows with a LUT, token pools,
    and a capacity one short (the plan overflows: only stage 1's outputs change)."""
    out = []
    for i, (bs, maxlen, pool, window, short) in enumerate(
            [(1, 3000, False, 0, False), (7, 700, True, 0, False), (256, 300, False, 0, False),
             (256, 4096, False, 0, False), (300, 200, True, 0, False), (1100, 40, False, 0, False),
             (33, 900, False, 128, False), (64, 500, True, 64, False), (9, 300, False, 0, True)]):
        g = torch.Generator(device=dev).manual_seed(100 + i)
        rows, cols, num_slots = bs + 2, maxlen + 8, 1 << (16 if window else 20)
        rpi = torch.randint(0, rows, (bs,), device=dev, generator=g)  # 0: padding
        prefix = torch.randint(0, maxlen + 1, (bs,), device=dev, generator=g)
        if maxlen >= 4096:
            prefix.fill_(maxlen)
        extend = torch.randint(0, 3, (bs,), device=dev, generator=g)
        rtt = torch.randint(-1, num_slots, (rows, cols), dtype=torch.int32, device=dev, generator=g)
        lut = torch.randint(-1, num_slots, (num_slots,), device=dev, generator=g) if window else None
        lens = torch.where(rpi != 0, prefix.clamp(max=window) if window else prefix, 0)  # the rows' entries
        total = int(lens.sum())
        cap = max(total - 1, 0) if short else total + 5
        tpool = torch.randint(0, 50000, (rows, cols), dtype=torch.int32, device=dev, generator=g) if pool else None
        valid = torch.randint(0, cols + 1, (bs,), device=dev, generator=g) if pool else None
        vp = VerifyPlan.allocate(verify_capacity=max(cap, 1), device=dev)
        wp = WritePlan.allocate(write_req_capacity=bs, device=dev)
        kw = builders.plan_kwargs(vp, wp, rpi, prefix, extend, rtt, window=window, lut=lut, pool=tpool, valid=valid,
                                  capacity=cap, token_offset=1 if pool else 0)
        out.append((f"bs {bs} x <= {maxlen}{' pool' if pool else ''}{f' window {window}' if window else ''}"
                    f"{' overflow' if short else ''}", kw))
    return out


def scatter_cases(dev: torch.device) -> list[tuple[str, Kw]]:
    """Random scatters: odd starts and widths, rows named twice, rows outside the pool, offsets past flat_in."""
    out = []
    for i, (bs, per, cols) in enumerate([(1, 5000, 4096), (5, 1000, 999), (256, 4096, 4096), (64, 3000, 2049),
                                         (300, 17, 33)]):
        g = torch.Generator(device=dev).manual_seed(200 + i)
        rows = max(bs // 2, 2)
        lens = torch.randint(0, per + 1, (bs,), device=dev, generator=g)
        offs = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), lens.cumsum(0)])
        offs = offs + int(torch.randint(0, 3, (1,), generator=torch.Generator().manual_seed(i)))
        ntok = int(offs[-1]) - (5 if i % 2 else 0)
        rpi = torch.randint(-1, rows + 1, (bs,), device=dev, generator=g)  # -1 and rows: outside the pool
        if bs == 256:
            lens.fill_(per)
            offs = torch.arange(bs + 1, device=dev) * per
            ntok = bs * per
            rpi = torch.arange(1, bs + 1, device=dev)
            rows = bs + 1
        flat = torch.randint(0, 1 << 40, (max(ntok, 1),), device=dev, generator=g)
        out.append((f"bs {bs} x <= {per}, {cols} columns",
                    {"flat_in": flat, "offsets": offs, "req_pool_indices": rpi,
                     "pool_out": torch.zeros(rows, cols, dtype=torch.int32, device=dev)}))
    return out


def write_cases(dev: torch.device) -> list[tuple[str, Kw]]:
    """Decode writes (bs 1, 8, 64, 256, 1024) PARTIAL over 2 sources, chained from stamped heads, and writes of
    random lengths (0 to 40 tokens a request, some skipped tokens) from new chains."""
    out = []
    for bs in (1, 8, 64, 256, 1024):
        num_slots = 4 * bs + 64
        locs = torch.randperm(num_slots - 1, device=dev) + 1
        ctx = builders.context(dev, num_slots=num_slots, sources=_sources(num_slots, 2, dev),
                               mode=kc.RealKvHashMode.PARTIAL)
        out.append((f"decode bs {bs}", workloads.decode_writes(ctx, locs[bs: 2 * bs], locs[:bs], backend="torch_ref")))
    for i, bs in enumerate((3, 37)):
        g = torch.Generator().manual_seed(300 + i)
        lengths = torch.randint(0, 41, (bs,), generator=g).tolist()
        n = sum(lengths)
        num_slots = n + 64
        locs = (torch.randperm(num_slots - 1, generator=g) + 1)[:n].to(dev)
        locs[torch.randint(0, max(n, 1), (3,), generator=g).to(dev) % max(n, 1)] = -1  # skipped tokens
        ctx = builders.context(dev, num_slots=num_slots, sources=_sources(num_slots, 2, dev),
                               mode=kc.RealKvHashMode.PARTIAL)
        out.append((f"lengths 0..40, bs {bs}", workloads.chain_writes(ctx, lengths, locs)))
    return out


def parity(op: str, variants: dict[str, Maker], cases: list[tuple[str, Kw]]) -> dict[str, str]:
    """Each variant's first difference from torch_ref over ``cases`` ('' where none)."""
    refs: dict[str, Callable[..., None]] = {"plan": kc.launch_canary_plan_kernels,
                                            "scatter": kc.launch_scatter_req_token_ids_kernel,
                                            "write": kc.launch_canary_write_kernel}
    ref = refs[op]
    bad = dict.fromkeys(variants, "")
    for label, kw in cases:
        if op == "plan":
            outs = list(builders.plan_outputs(kw).values())
            start = None
        elif op == "scatter":
            outs = [kw["pool_out"]]
            start = None
        else:
            outs = list(builders.context_outputs(kw).values())
            start = [t.clone() for t in outs]
        want = _outputs_after(outs, partial(ref, **kw, backend="torch_ref"), start)
        for name, make in variants.items():
            if bad[name]:
                continue
            try:
                got = _outputs_after(outs, make(kw), start)
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
            except Exception as exc:  # a variant that fails to compile or launch is reported, not fatal
                bad[name] = f"{label}: {type(exc).__name__}: {str(exc)[:300]}"
                continue
            for i, (a, b) in enumerate(zip(got, want, strict=True)):
                if not torch.equal(a, b):
                    bad[name] = f"{label}: output {i} differs ({int((a != b).sum())} elements)"
                    break
    for name, why in bad.items():
        print(f"parity {op} {name}: {'FAIL ' + why if why else 'ok'}", flush=True)
    return bad


# -- timing ---------------------------------------------------------------------------------------------------
def bench_plan(r: Report, variants: dict[str, Maker], rounds: int) -> None:
    from benchmarks import floors_cuda as fc

    dev = torch.device("cuda")
    batch = workloads.PlanBatch(256, 4096, sets=4, device=dev)
    kws = [batch.kwargs(i) for i in range(4)]
    times = side_by_side({k: [m(kw) for kw in kws] for k, m in variants.items()}, rounds)
    stream = min(fc.plan_stream_cuda(batch.entries, 4).values())
    for name, t in times.items():
        r.add(f"plan 256 x 4096: {name} vs the stream probe", t, stream, benchmark="i36x plan",
              target=1.25, note="floor: kvc_probe_stream_plan, 4 rotating sets")
    del batch, kws
    torch.cuda.empty_cache()


def bench_scatter(r: Report, variants: dict[str, Maker], copy_bw: float, rounds: int) -> None:
    bs, per = 256, 4096
    sets = workloads.scatter_sets(bs, per, 4, torch.device("cuda"))
    times = side_by_side({k: [m(kw) for kw in sets] for k, m in variants.items()}, rounds)
    floor = bs * per * 12 / copy_bw
    for name, t in times.items():
        r.add(f"scatter {bs} x {per}: {name}", t, floor, target=1.5, benchmark="i36x scatter",
              note="floor: 8 B read + 4 B written per token at copy bandwidth, 4 sets")


def bench_write(r: Report, variants: dict[str, Maker], rounds: int) -> None:
    from benchmarks import floors_cuda as fc

    dev = torch.device("cuda")
    for bs in (1, 8, 64, 256, 1024):
        num_slots = 4 * bs + 64
        locs = torch.randperm(num_slots - 1, device=dev) + 1
        ctx0 = builders.context(dev, num_slots=num_slots)
        kw0 = workloads.decode_writes(ctx0, locs[bs: 2 * bs], locs[:bs], backend="cuda")
        plan = kw0["plan"]
        probe = fc.dependent_loads_cuda(plan.write_offsets, plan.write_seed_slot_indices, kw0["input_ids"],
                                        kw0["out_cache_loc"], ctx0.canary_buf.view(torch.int64),
                                        warps_per_block=cwrite.WARPS)
        ctx = builders.context(dev, num_slots=num_slots, sources=_sources(num_slots, 2, dev),
                               mode=kc.RealKvHashMode.PARTIAL)
        kw = workloads.decode_writes(ctx, locs[bs: 2 * bs], locs[:bs], backend="cuda")
        times = side_by_side({k: [m(kw)] for k, m in variants.items()}, rounds)
        label = f"write bs={bs} x 1, PARTIAL, 2 sources"
        for name, t in times.items():
            r.add(f"{label}: {name}", t, probe, benchmark="i36x write",
                  target=1.5 if name.startswith("cuda") else None, note="floor: the dependent-load probe")
        for name, t in times.items():
            if name.startswith("triton"):
                for c in ("cuda", "cuda guess"):
                    if c in times:
                        r.value(f"{label}: {name} / {c}", t / times[c], None, unit="x", target=1.3,
                                benchmark="i36x write")


def emulate() -> int:
    """CPU: every cuda variant against torch_ref on the small cases, kernels built by the tests' emulation."""
    dev = torch.device("cpu")
    rc = 0
    table = {"plan": (plan_variants, plan_cases), "scatter": (scatter_variants, scatter_cases),
             "write": (write_variants, write_cases)}
    for op, (make_variants, cases) in table.items():
        variants = {k: m for k, m in make_variants().items() if k.startswith("cuda ")}
        small = [(label, kw) for label, kw in cases(dev) if _small(kw)]
        if any(parity(op, variants, small).values()):
            rc = 1
    return rc


def _small(kw: Kw) -> bool:
    """A case the emulation runs in seconds (a CPU thread per CUDA thread)."""
    sizes = [t.numel() for t in kw.values() if isinstance(t, torch.Tensor)]
    if "plan" in kw:
        sizes.append(kw["plan"].write_seed_slot_indices.numel() * 1000)
    return max(sizes, default=0) <= 300_000 and kw.get("verify_capacity", 0) <= 100_000


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the records here")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    ap.add_argument("--rounds", type=int, default=3, help="timings of each variant, in turn (median kept)")
    ap.add_argument("--no-time", action="store_true", help="parity only")
    ap.add_argument("--emulate", action="store_true",
                    help="no GPU: the cuda variants' parity on the host emulation (small cases), untimed")
    a = ap.parse_args()
    if a.emulate:
        return emulate()
    if not torch.cuda.is_available():
        print("bench_i36x: needs a CUDA device (or --emulate)", file=sys.stderr)
        return 2
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    if only - set(SECTIONS):
        print(f"bench_i36x: unknown sections {sorted(only - set(SECTIONS))}", file=sys.stderr)
        return 2
    import triton

    from benchmarks import floors

    dev = torch.device("cuda")
    torch.manual_seed(0)
    r = Report("i36 kernel candidates", machine(dev, f"triton {triton.__version__}"))
    copy_bw = floors.copy_bandwidth(dev)
    r.floor("copy bandwidth (B/s, read + written)", copy_bw, "device-to-device copy")
    rc = 0
    table = {"plan": (plan_variants, plan_cases), "scatter": (scatter_variants, scatter_cases),
             "write": (write_variants, write_cases)}
    for op in SECTIONS:
        if op not in only:
            continue
        make_variants, cases = table[op]
        variants = make_variants()
        bad = parity(op, variants, cases(dev))
        good = {k: m for k, m in variants.items() if not bad[k]}
        for k, why in bad.items():
            if why:
                r.note(f"{op} {k}: differs from torch_ref ({why}); not timed")
                rc = 1
        if a.no_time:
            continue
        if op == "plan":
            bench_plan(r, good, a.rounds)
        elif op == "scatter":
            bench_scatter(r, good, copy_bw, a.rounds)
        else:
            bench_write(r, good, a.rounds)
        torch.cuda.empty_cache()
    r.write(a.out)
    return rc


if __name__ == "__main__":
    sys.exit(main())

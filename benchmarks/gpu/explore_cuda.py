"""Tuning sweeps of the cuda backend on the GPU machine: ``python benchmarks/gpu/explore_cuda.py [SECTION...]``.

Sections: ``verify`` (threads x entries per thread x grid), ``chain`` (ways of walking write's chain over a
tile, beside the serial floors), ``stream`` (a plain stream of the plan's traffic at its size), ``host`` (the
steps of an eager launch's host time), ``plan`` (threads x entries per thread x register cap x grid, and the
fixed cost beside an empty kernel of the same grid), ``write`` (tiles per chain batch, chain warps per block),
``planshape`` (entries per thread against batch shapes, from few long rows to many short ones). Each variant
is the backend's own kernel source with other defines; results go to stdout
(benchmarks/results/raw/explore_*.log).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

import kvcanary as kc
from benchmarks import bench_cuda as bc
from benchmarks import floors_cuda as fc
from kvcanary.backends.cuda import write as cwrite
from kvcanary.backends.cuda._toolchain import Spec, cdiv, launch, load

DIR = str(Path(__file__).resolve().parent)
MI = 1 << 20


def k(entry: str, threads: int = 256, defines: tuple[tuple[str, int], ...] = ()) -> object:
    return load(Spec("explore_cuda.cu", entry, defines, threads, extra_include=DIR), 0)


def plan_variant(threads: int, ept: int, min_blocks: int = 0, *, lut: bool = False) -> Spec:
    """The backend's fused plan (no pool) with other threads, entries per thread and register cap."""
    return Spec("plan.cu", "kvc_plan", (("KVC_THREADS", threads), ("KVC_HAS_LUT", int(lut)), ("KVC_HAS_POOL", 0),
                                        ("KVC_PLAN_EPT", ept), ("KVC_PLAN_MIN_BLOCKS", min_blocks)), threads)


def run(kern: object, shape: tuple[int, int, int, int], *args: int) -> None:
    launch(kern, 0, shape, args)  # type: ignore[arg-type]


def main() -> None:
    what = sys.argv[1:] or ["verify", "chain", "stream", "host", "plan", "write"]
    if "chain" in what:
        steps = 1 << 15
        print(f"chain serial uniform   {fc.serial_step_floor_cuda(steps) * 1e9:7.1f} ns/step")
        print(f"chain serial vector    {fc.serial_vector_step_cuda(steps) * 1e9:7.1f} ns/step")
        toks = torch.randint(0, 50000, (steps,), device="cuda")
        poss = torch.arange(steps, device="cuda")
        hs = torch.empty(steps, dtype=torch.int64, device="cuda")
        for name in ("x_chain_shfl", "x_chain_smem", "x_chain_lane0"):
            kern = k(name, 32)
            t = fc.time_stream([partial(run, kern, (1, 1, 32, 0), toks.data_ptr(), poss.data_ptr(), hs.data_ptr(),
                                        steps)], reps=5)
            print(f"chain {name:16s} {t / steps * 1e9:7.1f} ns/step")
        buf = torch.zeros(2 * steps + 8, 32, dtype=torch.uint8, device="cuda")
        locs = (torch.randperm(2 * steps + 7, device="cuda") + 1)[:steps]
        ctx = bc._ctx(buf, (), kc.RealKvHashMode.NONE)
        kw = bc._write_kwargs(ctx, [steps], [-1], locs, poss)
        t = fc.time_stream([partial(cwrite.write, **kw)], reps=5)
        print(f"chain backend write    {t / steps * 1e9:7.1f} ns/step")
    if "verify" in what:
        world = bc.VerifyWorld(1 << 31)
        n = 16 * MI
        sets = world.sets(n, 4, seed=n)
        plans = [world.plan(s, p) for s, p in sets]
        if "verify" in what:
            ctx = bc._ctx(world.buf, (), kc.RealKvHashMode.NONE)
            from kvcanary.backends.cuda.verify import pack

            for threads in (256, 512):
                for ept in (1, 2, 4, 8):
                    spec = Spec("verify.cu", "kvc_verify", (
                        ("KVC_THREADS", threads), ("KVC_CHECK_TOKEN", 0), ("KVC_NSRC", 0), ("KVC_PARTIAL", 1),
                        ("KVC_VEC16", 1), ("KVC_EPT", ept)), threads)
                    kern = load(spec, 0)
                    for grid_kind in ("persist", "full"):
                        full = cdiv(n, threads * ept)
                        grid = min(cdiv(n, threads), kern.max_blocks) if grid_kind == "persist" else full
                        fns = [partial(launch, kern, 0, (grid, 1, threads, 0),
                                       pack(context=ctx, plan=p, check_verify_expected_token=False)[2]) for p in plans]
                        t = fc.time_stream(fns * 3, reps=8)
                        print(f"verify t{threads} ept{ept} {grid_kind:7s} grid {grid:6d} regs {kern.num_regs:3d} "
                              f"{t * 1e6:8.1f} us")
            torch.cuda.synchronize()
            print("verify violations:", int(ctx.violation_write_index[0]))
    if "write" in what:
        steps = 1 << 15
        nslots = 2 * steps + 8
        buf = torch.zeros(nslots, 32, dtype=torch.uint8, device="cuda")
        locs = (torch.randperm(nslots - 1, device="cuda") + 1)[:steps]
        ctx = bc._ctx(buf, (), kc.RealKvHashMode.NONE)
        shapes = {"1x32Ki": bc._write_kwargs(ctx, [steps], [-1], locs, torch.arange(steps, device="cuda")),
                  "64x512": bc._write_kwargs(ctx, [512] * 64, [-1] * 64, locs,
                                             torch.arange(512, device="cuda").repeat(64)),
                  "1024x1": bc.one_token_writes(ctx, locs)}  # turns ctx's position assert off: arbitrary seeds
        # 0: the backend's write.cu; 1, 2, 4: a candidate benchmarks/gpu/write_batch.cu (KVC_WRITE_BATCH), if present
        batches = (0, 1, 2, 4) if (Path(DIR) / "write_batch.cu").exists() else (0,)
        # (batch, chain warps per block): the backend's write.cu has batch 0 and cwrite.WARPS warps
        variants = [(b, cwrite.WARPS) for b in batches] + [(0, w) for w in (2, 4, 8, 16, 32) if w != cwrite.WARPS]
        for batch, warps in variants:
            defines = (("KVC_NSRC", 0), ("KVC_PARTIAL", 1), ("KVC_ASSERT", 0), ("KVC_VEC16", 1),
                       ("KVC_WRITE_WARPS", warps))
            spec = (Spec("write.cu", "kvc_write", defines, 32 * warps) if batch == 0 else
                    Spec("write_batch.cu", "kvc_write", (*defines, ("KVC_WRITE_BATCH", batch)), 256, extra_include=DIR))
            kern = load(spec, 0)
            for name, kw in shapes.items():
                _, sizes, args = cwrite.pack(**kw)
                shp = (cdiv(sizes[0], warps), 1, 32 * warps, 0)  # no fold rows: real-KV off
                t = fc.time_graph(partial(launch, kern, 0, shp, args), calls=20)
                per = f"{t / steps * 1e9:6.1f} ns/step" if name == "1x32Ki" else ""
                print(f"write batch {batch} warps {warps:2d} {name:7s} regs {kern.num_regs:3d} {t * 1e6:9.2f} us {per}")
        torch.cuda.synchronize()
        print("write violations:", int(ctx.violation_write_index[0]))
    if "plan" in what:
        from kvcanary.backends.cuda import plan as cplan
        from kvcanary.backends.cuda.plan_entries import shared_bytes

        pworld = bc.PlanWorld()
        bs, entries, vps = pworld.bs, pworld.entries, pworld.vps
        argsets = [cplan.pack(**pworld.kwargs(i))[2] for i in range(len(vps))]
        # the fixed cost: the same batch with 16-token prefixes (4 Ki entries: the prologue, no traffic to speak of)
        small = torch.full((bs,), 16, dtype=torch.int64, device="cuda")
        vsmall = kc.VerifyPlan.allocate(verify_capacity=entries, device="cuda")
        a_small = cplan.pack(**pworld.kwargs(0, prefix_lens=small, verify_plan_out=vsmall))
        kern0 = cplan.KERNELS.get(0, a_small[0])
        shp0 = cplan.shape(a_small[0], a_small[1], kern0.max_blocks)
        t = fc.time_graph(partial(launch, kern0, 0, shp0, a_small[2]))
        print(f"plan bs=256 x 16 (fixed cost), grid {shp0[0]} {t * 1e6:7.2f} us")
        empty = fc.probe("kvc_probe_empty")
        t = fc.time_graph(partial(launch, empty, 0, (shp0[0], 1, 256, shp0[3]), (0,)))
        print(f"empty kernel, the plan's grid and shared memory {t * 1e6:7.2f} us")
        ref = None
        # (threads, entries per thread, blocks per SM ptxas must fit: a register cap, 0 = ptxas's choice)
        for threads, ept, min_blocks in ((256, 4, 0), (256, 4, 3), (256, 4, 5), (256, 4, 6), (256, 8, 0),
                                         (256, 8, 5), (256, 16, 0), (512, 8, 0)):
            kern = load(plan_variant(threads, ept, min_blocks), 0, shared_bytes(bs))
            tiles = cdiv(entries, threads * ept)
            grids = {"resident": min(tiles + 1, kern.max_blocks)}
            if min_blocks == 0 and ept == 4:
                grids["full"] = 1 + tiles
            for grid_kind, grid in grids.items():
                for label, arglists in (("4096", argsets), ("16 (fixed)", [a_small[2]])):
                    fns = [partial(launch, kern, 0, (grid, 1, threads, shared_bytes(bs)), a) for a in arglists]
                    t = fc.rotating_graph(fns) if len(fns) > 1 else fc.time_graph(fns[0])
                    torch.cuda.synchronize()
                    ok = ""
                    if len(fns) > 1:
                        got = vps[0].verify_slot_indices.clone()
                        ok = "ok" if ref is None or torch.equal(got, ref) else "MISMATCH"
                        ref = got if ref is None else ref
                    print(f"plan t{threads} ept{ept} minb{min_blocks} {grid_kind:10s} grid {grid:5d} "
                          f"regs {kern.num_regs:3d} x{label:10s} {t * 1e6:7.2f} us {ok}")
    if "planshape" in what:
        plan_shape_sweep()
    if "host" in what:
        host_sweep()
    if "stream" in what:
        n = MI
        for label, t in fc.plan_stream_cuda(n, 1).items():
            print(f"stream plan traffic 1Mi {label} graph, 1 output set        {t * 1e6:7.2f} us  "
                  f"({36 * n / t / 1e12:.2f} TB/s)")
        # four output sets in turn, as the plan benchmark rotates its plans (128 MiB: more than L2 holds)
        for label, t in fc.plan_stream_cuda(n, 4).items():
            print(f"stream plan traffic 1Mi {label} graph, 4 rotating output sets {t * 1e6:7.2f} us  "
                  f"({36 * n / t / 1e12:.2f} TB/s)")
        a = torch.empty(36 * n // 8, dtype=torch.int64, device="cuda")
        b = torch.empty_like(a)
        t = fc.time_graph(lambda: b.copy_(a))
        print(f"copy 36 MiB graph {t * 1e6:7.2f} us  ({2 * 36 * n / t / 1e12:.2f} TB/s r+w)")
        fills = [torch.empty(32 * n // 8, dtype=torch.int64, device="cuda") for _ in range(4)]
        t = fc.rotating_graph([partial(torch.Tensor.fill_, f, 7) for f in fills])
        print(f"fill 32 MiB graph, 4 rotating buffers {t * 1e6:7.2f} us  ({32 * n / t / 1e12:.2f} TB/s written)")


def plan_shape_sweep() -> None:
    """Entries per thread (the tile size) against batch shapes: larger tiles cut per-tile work but leave fewer
    tiles, hence fewer busy blocks, for a batch of few long rows."""
    from kvcanary.backends.cuda import plan as cplan
    from kvcanary.backends.cuda.plan_entries import shared_bytes

    lut = torch.randint(0, 1 << 24, (1 << 24,), dtype=torch.int64, device="cuda")
    # (bs, prefix, SWA window): few long rows to many short ones, rows no multiple of any tile, SWA + LUT
    for bs, prefix, window in ((256, 4096, 0), (256, 4000, 0), (256, 1000, 0), (1024, 1000, 0), (256, 16, 0),
                               (64, 16384, 0), (8, 131072, 0), (2, 262144, 0), (256, 4096, 1024)):
        world = bc.PlanWorld(bs=bs, prefix=prefix)
        n = bs * (window or prefix)
        argsets = [cplan.pack(**world.kwargs(i, window=window, lut=lut))[2] for i in range(len(world.vps))]
        for ept in (4, 8, 16):
            kern = load(plan_variant(256, ept, lut=window > 0), 0, shared_bytes(bs))
            grid = 1 + min(cdiv(world.entries, 256 * ept) + bs, kern.max_blocks - 1)
            fns = [partial(launch, kern, 0, (grid, 1, 256, shared_bytes(bs)), a) for a in argsets]
            t = fc.rotating_graph(fns)
            torch.cuda.synchronize()
            ok = int(world.vps[0].verify_num_valid[0]) == n and int(world.vps[0].enable[0]) == 1
            print(f"planshape bs {bs:4d} x {prefix:6d} window {window:4d} ept{ept:2d} grid {grid:4d} "
                  f"regs {kern.num_regs:3d} {t * 1e6:7.2f} us {'ok' if ok else 'BAD'}")
        del world, argsets


def host_sweep() -> None:
    """Host microseconds of each step of an eager launch (write 1024 x 1) beside an empty kernel's."""
    from kvcanary.backends.cuda import _toolchain as tc

    def us(fn: Callable[[], object]) -> str:
        return f"{fc.host_time(fn) * 1e6:6.2f} us"

    empty = fc.probe("kvc_probe_empty", 32)
    print("host toolchain launch, empty kernel  ", us(partial(launch, empty, 0, (1, 1, 32, 0), (0,))))
    print("host _current_device()               ", us(tc._current_device))
    print("host current_stream(0)               ", us(partial(tc.current_stream, 0)))
    cc = tc.core()
    stream = tc._stream(tc.current_stream(0))
    cfg = tc._config(1, 1, 32, 0)
    print("host cuda.core launch, empty kernel  ", us(partial(cc.launch, stream, cfg, empty.kernel, 0)))
    buf = torch.zeros(4096, 32, dtype=torch.uint8, device="cuda")
    kw = bc.one_token_writes(bc._ctx(buf, (), kc.RealKvHashMode.NONE), torch.arange(1, 2049, device="cuda"))
    key, sizes, args = cwrite.pack(**kw)
    kern = cwrite.KERNELS.get(0, key)
    shp = cwrite.shape(key, sizes, kern.max_blocks)
    print("host write 1024x1: backend impl      ", us(partial(cwrite.write, **kw)))
    print("host write 1024x1: pack              ", us(partial(cwrite.pack, **kw)))
    print("host write 1024x1: toolchain launch  ", us(partial(launch, kern, 0, shp, args)))
    wcfg = tc._config(*shp)
    print("host write 1024x1: cuda.core launch  ", us(partial(cc.launch, stream, wcfg, kern.kernel, *args)))


if __name__ == "__main__":
    main()

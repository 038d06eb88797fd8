"""Tuning sweeps of the cuda backend on the GPU machine: ``python benchmarks/gpu/explore_cuda.py [SECTION...]``.

Sections: ``verify`` (threads x entries per thread x grid), ``chain`` (ways of walking
write's chain over a tile, beside the serial floors), ``stream`` (a plain stream of the plan's traffic at its
size), ``plan`` (threads x entries per thread x grid), ``write`` (tiles per chain batch). Each variant is the
backend's own kernel source with other defines; results go to stdout (benchmarks/results/raw/explore_*.log).
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

import kvcanary as kc
from backends.cuda import write as cwrite
from backends.cuda._toolchain import Spec, cdiv, launch, load
from benchmarks import bench_cuda as bc
from benchmarks import floors_cuda as fc

DIR = str(Path(__file__).resolve().parent)
MI = 1 << 20


def k(entry: str, threads: int = 256, defines: tuple[tuple[str, int], ...] = ()) -> object:
    return load(Spec("explore_cuda.cu", entry, defines, threads, extra_include=DIR), 0)


def run(kern: object, shape: tuple[int, int, int, int], *args: int) -> None:
    launch(kern, 0, shape, args)  # type: ignore[arg-type]


def main() -> None:
    what = sys.argv[1:] or ["verify", "chain", "stream", "plan", "write"]
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
            from backends.cuda.verify import pack

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
        ctx.enable_chain_position_assert.zero_()  # the 1024 x 1 seeds are arbitrary slots
        shapes = {"1x32Ki": bc._write_kwargs(ctx, [steps], [-1], locs, torch.arange(steps, device="cuda")),
                  "64x512": bc._write_kwargs(ctx, [512] * 64, [-1] * 64, locs,
                                             torch.arange(512, device="cuda").repeat(64)),
                  "1024x1": bc._write_kwargs(ctx, [1] * 1024, locs[1024:2048].tolist(), locs[:1024].contiguous(),
                                             torch.zeros(1024, dtype=torch.int64, device="cuda"))}
        # 0: the backend's write.cu; 1, 2, 4: a candidate benchmarks/gpu/write_batch.cu (KVC_WRITE_BATCH), if present
        batches = (0, 1, 2, 4) if (Path(DIR) / "write_batch.cu").exists() else (0,)
        for batch in batches:
            defines = (("KVC_NSRC", 0), ("KVC_PARTIAL", 1), ("KVC_ASSERT", 0), ("KVC_VEC16", 1), ("KVC_WRITE_WARPS", 8))
            spec = (Spec("write.cu", "kvc_write", defines, 256) if batch == 0 else
                    Spec("write_batch.cu", "kvc_write", (*defines, ("KVC_WRITE_BATCH", batch)), 256, extra_include=DIR))
            kern = load(spec, 0)
            for name, kw in shapes.items():
                key, sizes, args = cwrite.pack(**kw)
                shp = cwrite.shape(key, sizes, kern.max_blocks)
                t = fc.time_graph(partial(launch, kern, 0, shp, args), calls=20)
                per = f"{t / steps * 1e9:6.1f} ns/step" if name == "1x32Ki" else ""
                print(f"write batch {batch} {name:7s} regs {kern.num_regs:3d} {t * 1e6:9.2f} us {per}")
        torch.cuda.synchronize()
        print("write violations:", int(ctx.violation_write_index[0]))
    if "plan" in what:
        from backends.cuda import plan as cplan
        from backends.cuda.plan_entries import shared_bytes

        bs, prefix, nsets = 256, 4096, 4
        entries = bs * prefix
        rpi = torch.arange(1, bs + 1, device="cuda")
        prefix_t = torch.full((bs,), prefix, dtype=torch.int64, device="cuda")
        extend = torch.ones(bs, dtype=torch.int64, device="cuda")
        rtts = [torch.randint(1, 1 << 24, (bs + 1, prefix + 8), dtype=torch.int32, device="cuda") for _ in range(nsets)]
        vps = [kc.VerifyPlan.allocate(verify_capacity=entries, device="cuda") for _ in range(nsets)]
        wps = [kc.WritePlan.allocate(write_req_capacity=bs, device="cuda") for _ in range(nsets)]
        argsets = [cplan.pack(verify_plan_out=vps[i], write_plan_out=wps[i], req_pool_indices=rpi,
                              prefix_lens=prefix_t, extend_seq_lens=extend, req_to_token=rtts[i], swa_window_size=0,
                              full_to_swa_index_mapping=None, verify_capacity=entries,
                              req_to_verify_expected_tokens=None, req_to_verify_expected_tokens_valid_lens=None,
                              kv_token_id_vs_position_offset=0)[2] for i in range(nsets)]
        # the fixed cost: the same batch with 16-token prefixes (4 Ki entries: the prologue, no traffic to speak of)
        small = torch.full((bs,), 16, dtype=torch.int64, device="cuda")
        vsmall = kc.VerifyPlan.allocate(verify_capacity=entries, device="cuda")
        a_small = cplan.pack(verify_plan_out=vsmall, write_plan_out=wps[0], req_pool_indices=rpi, prefix_lens=small,
                             extend_seq_lens=extend, req_to_token=rtts[0], swa_window_size=0,
                             full_to_swa_index_mapping=None, verify_capacity=entries,
                             req_to_verify_expected_tokens=None, req_to_verify_expected_tokens_valid_lens=None,
                             kv_token_id_vs_position_offset=0)
        kern0 = cplan.KERNELS.get(0, a_small[0])
        t = fc.time_graph(partial(launch, kern0, 0, cplan.shape(a_small[0], a_small[1], kern0.max_blocks), a_small[2]))
        print(f"plan bs=256 x 16 (fixed cost) {t * 1e6:7.2f} us")
        ref = None
        for threads in (256, 512, 1024):
            for ept in (1, 2, 4, 8):
                spec = Spec("plan.cu", "kvc_plan", (("KVC_THREADS", threads), ("KVC_HAS_LUT", 0), ("KVC_HAS_POOL", 0),
                                                    ("KVC_PLAN_EPT", ept)), threads)
                kern = load(spec, 0, shared_bytes(bs))
                for grid_kind in ("persist", "full"):
                    tiles = cdiv(entries, threads * ept)
                    grid = 1 + (min(tiles, kern.max_blocks) if grid_kind == "persist" else tiles)
                    fns = [partial(launch, kern, 0, (grid, 1, threads, shared_bytes(bs)), a) for a in argsets]
                    t = bc.rotating_graph(fns)
                    torch.cuda.synchronize()
                    got = vps[0].verify_slot_indices.clone()
                    ok = ref is None or torch.equal(got, ref)
                    ref = got if ref is None else ref
                    print(f"plan t{threads} ept{ept} {grid_kind:7s} grid {grid:5d} regs {kern.num_regs:3d} "
                          f"{t * 1e6:7.2f} us {'ok' if ok else 'MISMATCH'}")
    if "stream" in what:
        n = MI
        src = torch.randint(0, 1 << 30, (n,), dtype=torch.int32, device="cuda")
        outs = [torch.empty(n, dtype=torch.int64, device="cuda") for _ in range(4)]
        for u in (1, 4):
            kern = k(f"x_stream4_u{u}")
            t = fc.time_graph(partial(run, kern, (cdiv(n, 256 * u), 1, 256, 0), src.data_ptr(),
                                      *(o.data_ptr() for o in outs), n))
            print(f"stream4 1Mi u{u} graph {t * 1e6:7.2f} us  ({36 * n / t / 1e12:.2f} TB/s)")
        # four output sets in turn, as the plan benchmark rotates its plans (128 MiB: more than L2 holds)
        out_sets = [[torch.empty(n, dtype=torch.int64, device="cuda") for _ in range(4)] for _ in range(4)]
        kern = k("x_stream4_u4")
        fns = [partial(run, kern, (cdiv(n, 1024), 1, 256, 0), src.data_ptr(), *(o.data_ptr() for o in outs4), n)
               for outs4 in out_sets]
        t = bc.rotating_graph(fns)
        print(f"stream4 1Mi u4 graph, 4 rotating output sets {t * 1e6:7.2f} us  ({36 * n / t / 1e12:.2f} TB/s)")
        a = torch.empty(36 * n // 8, dtype=torch.int64, device="cuda")
        b = torch.empty_like(a)
        t = fc.time_graph(lambda: b.copy_(a))
        print(f"copy 36 MiB graph {t * 1e6:7.2f} us  ({2 * 36 * n / t / 1e12:.2f} TB/s r+w)")


if __name__ == "__main__":
    main()

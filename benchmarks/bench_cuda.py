"""GPU benchmark of the cuda backend: every figure beside its floor, floors measured in the same run.

Usage (repository root, a CUDA GPU)::

    python benchmarks/bench_cuda.py --out bench_cuda.json [--quick]

Every launch goes through a public launcher with ``backend="cuda"`` (contract check and registry dispatch
included); the verify launch-shape variants alone call the backend's ``verify.verify_variant`` hook, with a
contract-checked ``VerifyLaunch``. Figures replayed from a CUDA graph are GPU time only (the host checks
vanish there: that is how each kernel is timed without them); eager figures (events around back-to-back
launches) include the host time where it exceeds the GPU's. Figures (``ratio`` = time / floor; a target of
"<= 1.11" is "at least 0.9x the floor's throughput"):

- verify, real-KV off, 1 Mi and 16 Mi entries over a 2 GiB canary buffer, against the two-record random-gather
  floor (the CUDA probe, timed like the kernel, and benchmarks/floors.py's Triton probe); SGLang's launch shape
  (64 blocks x 512 threads, 8-byte field loads) and the other two combinations as comparison variants;
- verify PARTIAL (2 sources) and ALL (1 source, 128 B), against the gather floor plus the extra bytes at copy
  bandwidth, and against a probe doing the same gathers without hashing;
- write: one 32 Ki-token request against the serial mix3 floor (32 Ki steps; the registers-only probe ptxas
  runs on the uniform datapath, and the same chain from loaded values on the vector datapath), real-KV off,
  PARTIAL, ALL; 1024 one-token requests (a decode step) against an empty kernel launch and against a launch
  doing only their dependent loads;
- plan: bs = 256 with 4096-token prefixes (1 Mi entries) against the bytes floor (what it must read and write
  at copy bandwidth) and a plain stream of its traffic; with the token pool; with an SWA window and LUT; rows
  that are no multiple of a tile; the two stages as separate launches;
- scatter: 256 requests x 4096 tokens against its bytes floor, in a graph and eager;
- host: per operation, the host time of one eager public launch against a bare cuda.core launch of an empty
  kernel, and its GPU time in a graph against an empty kernel's.

Inputs come from ``tools.workloads`` and verify clean; the benchmark checks that they did.
``--out`` gets the records (benchmarks/report.py), the details (floors, targets, kernels) go to ``raw/``.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks import floors, timing
from benchmarks import floors_cuda as fc
from benchmarks.report import Report, machine
from kvcanary.ops.verify import VerifyLaunch
from kvcanary.registry import Op
from kvcanary.testing import builders, calls
from kvcanary.testing.parity import launcher
from kvcanary_backends.cuda import preload
from kvcanary_backends.cuda import verify as cverify
from kvcanary_backends.cuda._toolchain import cdiv, core, loaded
from kvcanary_backends.cuda.write import WARPS as WRITE_WARPS
from tools import workloads

MI = 1 << 20
GATHER_BYTES = 2 * 32 + 16 + 8  # what the gather floor moves per entry: two records, two indices in, 8 B out
DEV = "cuda"
R = Report("cuda")


def _clean(ctx: kc.VerifyOrWriteContext, what: str) -> None:
    torch.cuda.synchronize()
    n = int(ctx.violation_write_index[0])
    if n:
        raise RuntimeError(f"bench_cuda: {what} recorded {n} violations; its inputs should be clean")


def _verifies(ctx: kc.VerifyOrWriteContext, plans: Sequence[kc.VerifyPlan], *, check: bool = False
              ) -> list[Callable[[], None]]:
    return [partial(kc.launch_canary_verify_kernel, context=ctx, plan=p, check_verify_expected_token=check,
                    backend="cuda") for p in plans]


def _variant(ctx: kc.VerifyOrWriteContext, plans: Sequence[kc.VerifyPlan], *, grid: int | None, threads: int,
             vec: bool) -> list[Callable[[], None]]:
    return [partial(cverify.verify_variant,
                    VerifyLaunch(context=ctx, plan=p, check_verify_expected_token=False), grid=grid,
                    threads=threads, vec=vec) for p in plans]


# -- verify ---------------------------------------------------------------------------------------------------
def bench_verify(world: workloads.RandomPrevRecords, sizes: list[int], triton_gather: dict[int, float], copy_bw: float,
                 quick: bool) -> None:
    for n in sizes:
        sets = world.index_sets(n, 4, seed=n)
        plans = [world.plan(s, p) for s, p in sets]
        cuda_floor, unroll = fc.gather_floor_cuda_detail(world.buf, sets)
        R.floor(f"gather2 CUDA probe {n // MI} Mi (s)", cuda_floor,
                f"per gather of the verify run's own records (16-byte loads, {unroll} entries/thread)")
        if floors.TRITON and n in triton_gather:  # the Triton probe over the very same slot/predecessor arrays
            try:
                triton_gather[n] = floors.gather_floor_for(world.buf, [s for s, _ in sets], [p for _, p in sets])
            except Exception as exc:
                R.note(f"Triton gather over the verify arrays failed: {type(exc).__name__}: {exc}")
            else:
                R.floor(f"gather2 Triton probe, verify arrays {n // MI} Mi (s)", triton_gather[n],
                        "benchmarks/floors.py")
        ctx = world.context()
        variants = [
            ("kvcanary (auto grid x 256, 16-B loads)", _verifies(ctx, plans)),
            ("SGLang shape (64 x 512, 8-B loads)", _variant(ctx, plans, grid=64, threads=512, vec=False)),
            ("64 x 512, 16-B loads", _variant(ctx, plans, grid=64, threads=512, vec=True)),
            ("auto grid x 256, 8-B loads", _variant(ctx, plans, grid=None, threads=256, vec=False)),
            ("kvcanary + token check", _verifies(ctx, plans, check=True)),
        ]
        for label, fns in variants:
            t = timing.graph(fns, reps=7 if quick else 15)
            main = label.startswith("kvcanary (")
            R.add(f"NONE {n // MI} Mi: {label}", t, cuda_floor, note="in a CUDA graph, vs the CUDA gather probe",
                  target=1 / 0.9 if main else None, benchmark="cuda verify")
            if main and n in triton_gather:
                R.add(f"NONE {n // MI} Mi vs Triton gather floor", t, triton_gather[n], target=1 / 0.9,
                      note="benchmarks/floors.py probe over the same index arrays", benchmark="cuda verify")
        _clean(ctx, "verify NONE")
    # real-KV: PARTIAL over 2 sources (K and V), ALL over 1 source of 128-byte strips
    n = sizes[0] if quick else sizes[-1]
    sets = world.index_sets(n, 4, seed=7)
    plans = [world.plan(s, p) for s, p in sets]
    nbpt = 128
    srcs = workloads.byte_sources(world.num_slots, nbpt, 2, DEV)
    for mode, k, chunks in ((kc.RealKvHashMode.PARTIAL, 2, 1), (kc.RealKvHashMode.ALL, 1, nbpt // 16)):
        ctx = world.context(srcs[:k], mode)
        t = timing.graph(_verifies(ctx, plans), reps=7 if quick else 15)
        base = fc.gather_floor_cuda(world.buf, sets)
        extra_bytes = k * 16 * chunks  # per entry
        probe = fc.gather_rkv_floor_cuda(world.buf, sets, [s.tensor for s in srcs[:k]], chunks)
        name = f"{mode.name} {k} src x {16 * chunks} B, {n // MI} Mi"
        sector_bytes = k * 32 * cdiv(16 * chunks, 32)  # a strip moves in whole 32-byte sectors
        for label, floor, note in (
                ("gather + extra bytes at copy bw", base + n * extra_bytes / copy_bw,
                 f"gather {base * 1e6:.0f} us + {n * extra_bytes / MI:.0f} MiB at copy bandwidth"),
                ("gather x bytes ratio", base * (GATHER_BYTES + extra_bytes) / GATHER_BYTES,
                 f"extra bytes at the gather's own rate ({GATHER_BYTES}+{extra_bytes} B/entry)"),
                ("gather x sectors ratio", base * (GATHER_BYTES + sector_bytes) / GATHER_BYTES,
                 f"extra bytes in whole 32-byte sectors ({GATHER_BYTES}+{sector_bytes} B/entry)")):
            R.add(f"{name} vs {label}", t, floor, note=note, target=1 / 0.85, benchmark="cuda verify")
        R.add(f"{name} vs same-gathers probe", t, probe, note="records + strips gathered, no hashing",
              benchmark="cuda verify")
        _clean(ctx, f"verify {mode.name}")
    world.stamp_real_kv((), kc.RealKvHashMode.NONE)


# -- write ----------------------------------------------------------------------------------------------------
def bench_write(serial_floor: float, vector_floor: float, empty: dict[str, float], quick: bool) -> None:
    steps = 32 * 1024
    num_slots = 2 * steps + 8
    locs = torch.randperm(num_slots - 1, device=DEV) + 1
    kv256, kv2k = (workloads.byte_sources(num_slots, 256, 1, DEV)
                   + workloads.byte_sources(num_slots, 2048, 1, DEV, seed=1))
    cases: list[tuple[str, tuple[kc.RealKvSource, ...], kc.RealKvHashMode]] = [
        ("real-KV off", (), kc.RealKvHashMode.NONE),
        ("PARTIAL, 1 source", (kv256,), kc.RealKvHashMode.PARTIAL),
        ("ALL, 1 source x 256 B", (kv256,), kc.RealKvHashMode.ALL),
        ("ALL, 1 source x 2 KiB", (kv2k,), kc.RealKvHashMode.ALL),
    ]
    for label, sources, mode in cases:
        ctx = builders.context(DEV, num_slots=num_slots, sources=sources, mode=mode)
        kw = workloads.chain_writes(ctx, [steps], locs)
        t = timing.graph(partial(kc.launch_canary_write_kernel, **kw, backend="cuda"), reps=5 if quick else 10)
        R.add(f"1 x 32 Ki tokens, {label}", t, serial_floor * steps, unit="ms",
              target=1.15 if mode == kc.RealKvHashMode.NONE else None, benchmark="cuda write",
              note=f"serial mix3 floor {serial_floor * 1e9:.1f} ns/step x {steps} (uniform datapath)")
        if mode == kc.RealKvHashMode.NONE:
            R.add(f"1 x 32 Ki tokens, {label}, vs the vector-datapath chain", t, vector_floor * steps, unit="ms",
                  target=1.15, benchmark="cuda write",
                  note=f"mix3 chain from loaded values {vector_floor * 1e9:.1f} ns/step x {steps}")
        _clean(ctx, f"write {label}")
    # a decode step: 1024 one-token requests, each continuing a chain
    reqs = 1024
    ctx = builders.context(DEV, num_slots=num_slots)
    kw = workloads.decode_writes(ctx, locs[reqs : 2 * reqs], locs[:reqs], backend="cuda")
    one = partial(kc.launch_canary_write_kernel, **kw, backend="cuda")
    t_graph = timing.graph(one, rounds=100)
    R.add("1024 x 1 token, back-to-back eager launches", timing.events([one] * 50, reps=10), empty["eager"],
          target=1.5, note="public launcher vs an empty CUDA kernel's bare launch, back to back",
          benchmark="cuda write")
    R.add("1024 x 1 token, in a CUDA graph", t_graph, empty["graph"], target=1.5,
          note="vs an empty CUDA kernel in a graph (GPU time)", benchmark="cuda write")
    plan = kw["plan"]
    t_dep = fc.dependent_loads_cuda(plan.write_offsets, plan.write_seed_slot_indices, kw["input_ids"],
                                    kw["out_cache_loc"], ctx.canary_buf.view(torch.int64), warps_per_block=WRITE_WARPS)
    R.add("1024 x 1 token, in a CUDA graph, vs its dependent loads", t_graph, t_dep, benchmark="cuda write",
          note="a launch doing only the two dependent loads and the store of each request (graph, GPU time)")
    _clean(ctx, "decode write")


# -- plan -----------------------------------------------------------------------------------------------------
def _plans(batch: workloads.PlanBatch, *, pool: bool = False, window: int = 0, lut: torch.Tensor | None = None
           ) -> list[Callable[[], None]]:
    return [partial(kc.launch_canary_plan_kernels, **batch.kwargs(i, pool=pool, window=window, lut=lut),
                    backend="cuda") for i in range(len(batch.vps))]


def bench_plan(copy_bw: float, quick: bool) -> None:
    batch = workloads.PlanBatch(256, 4096, sets=4, device=DEV, pools=True)
    bs, prefix, sets, entries = batch.bs, batch.prefix, len(batch.vps), batch.entries
    lut = torch.randint(0, 1 << 24, (1 << 24,), dtype=torch.int64, device=DEV) if not quick else None
    cases = [(f"bs={bs} x {prefix} prefix", False, 0), (f"bs={bs} x {prefix} prefix + token pool", True, 0)]
    if lut is not None:
        cases.append((f"bs={bs}, SWA window 1024 + LUT", False, 1024))
    for label, pool, window in cases:
        fns = _plans(batch, pool=pool, window=window, lut=lut)
        n = bs * (window if window else prefix)
        t = timing.graph(fns)
        per_entry = 4 + 32 + (4 if pool else 0) + (8 if window else 0)  # rtt read, 4 outputs, pool, LUT
        nbytes = n * per_entry + bs * (24 + 16 + 8 + (8 if pool else 0)) + 16
        R.add(label, t, nbytes / copy_bw, target=1.15 if not pool and not window else None, benchmark="cuda plan",
              note=f"in a CUDA graph: {nbytes / MI:.1f} MiB at copy bandwidth ({n} entries)")
        R.add(f"{label}, eager back to back", timing.events(fns * 3, reps=7 if quick else 15), nbytes / copy_bw,
              note="host-bound when the kernel is shorter than a launch (see cuda host)", benchmark="cuda plan")
        torch.cuda.synchronize()
        assert int(batch.vps[0].enable[0]) == 1 and int(batch.vps[0].verify_num_valid[0]) == n
        if not pool and not window:
            streams = fc.plan_stream_cuda(n, sets)
            best = min(streams, key=streams.__getitem__)
            tried = ", ".join(f"{k} {v * 1e6:.2f} us" for k, v in streams.items())
            R.add(f"{label} vs a plain stream of its traffic", t, streams[best], benchmark="cuda plan",
                  note=f"probe kvc_probe_stream_plan {best} (of {tried}), same rotation")
    # rows that are no multiple of the tile: each row's last tile is partial
    odd = workloads.PlanBatch(bs, 4000, sets=sets, device=DEV)
    nbytes = odd.entries * 36 + bs * 48 + 16
    R.add(f"bs={bs} x 4000 prefix (rows no multiple of a tile)", timing.graph(_plans(odd)), nbytes / copy_bw,
          note=f"in a CUDA graph: {nbytes / MI:.1f} MiB at copy bandwidth ({odd.entries} entries)",
          benchmark="cuda plan")
    torch.cuda.synchronize()
    assert int(odd.vps[0].enable[0]) == 1 and int(odd.vps[0].verify_num_valid[0]) == odd.entries
    del odd
    # the two stages as separate launches, for comparison
    kw = batch.kwargs(0)
    scratch = batch.vps[0].verify_offsets_scratch
    assert scratch is not None
    stage1 = partial(kc.launch_plan_offsets_kernel, **builders.plan_offsets_kwargs(kw, scratch), backend="cuda")
    stage2 = partial(kc.launch_plan_entries_kernel, **builders.plan_entries_kwargs(kw, scratch), backend="cuda")
    R.add(f"bs={bs} x {prefix} as offsets + entries launches", timing.graph([stage1, stage2]) * 2,
          (entries * 36 + bs * 48) / copy_bw, note="both launches in a CUDA graph (no rotation: L2-warm inputs)",
          benchmark="cuda plan")


def bench_scatter(copy_bw: float, quick: bool) -> None:
    bs, per = 256, 4096
    fns = [partial(kc.launch_scatter_req_token_ids_kernel, **kw, backend="cuda")
           for kw in workloads.scatter_sets(bs, per, 4, DEV)]
    floor = bs * per * 12 / copy_bw
    R.add(f"{bs} x {per} tokens", timing.graph(fns), floor, benchmark="cuda scatter",
          note="in a CUDA graph: 8 B read + 4 B written per token at copy bandwidth, 4 rotating sets")
    R.add(f"{bs} x {per} tokens, eager back to back", timing.events(fns * 3, reps=7 if quick else 15), floor,
          note="host-bound when the kernel is shorter than a launch", benchmark="cuda scatter")


# -- host cost of a launch ------------------------------------------------------------------------------------
def bench_host(empty: dict[str, float]) -> None:
    """Small launches of every operation (kvcanary.testing.calls): host time of the public launcher, and the
    GPU time of the same launch in a graph."""
    small: dict[Op, Callable[[str], dict[str, object]]] = {
        Op.VERIFY: calls.verify, Op.WRITE: calls.write, Op.PLAN: calls.plan, Op.PLAN_OFFSETS: calls.plan_offsets,
        Op.PLAN_ENTRIES: calls.plan_entries, Op.SCATTER: calls.scatter}
    for op, build in small.items():
        kw = build(DEV)
        pub = partial(launcher(op), **kw, backend="cuda")
        R.add(f"{op.value}: public launcher, host time", timing.wall(pub, calls=2000), empty["host"],
              note="vs a bare cuda.core launch of an empty kernel (host)", benchmark="cuda host")
        R.add(f"{op.value}: in a CUDA graph", timing.graph(pub, rounds=50), empty["graph"],
              note="vs an empty kernel in a graph (GPU time)", benchmark="cuda host")


# -- main -----------------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default="bench_cuda.json", help="JSON results file (details go to raw/ beside it)")
    ap.add_argument("--quick", action="store_true", help="1 Mi verify only, fewer repetitions")
    ap.add_argument("--buf-gib", type=float, default=2.0, help="canary buffer size for verify (GiB)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_cuda: no CUDA device")
        return 2
    t0 = time.time()
    props = torch.cuda.get_device_properties(0)
    R.machine = machine(DEV)
    R.details["device"] = {"name": props.name, "capability": list(torch.cuda.get_device_capability(0)),
                           "sms": props.multi_processor_count, "torch": torch.__version__, "cuda": torch.version.cuda,
                           "cuda.core": getattr(core(), "__version__", "?"), "python": platform.python_version()}
    print(f"bench_cuda on {R.machine} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs)", flush=True)
    t = time.time()
    print(f"compiled and loaded {preload(DEV)} specializations in {time.time() - t:.1f} s", flush=True)

    copy_bw = floors.copy_bandwidth(DEV)
    R.floor("copy bandwidth (B/s, read + written)", copy_bw, "device-to-device copy")
    serial = fc.serial_step_floor_cuda()
    R.floor("serial mix3 step, CUDA probe (s)", serial, "registers only")
    vector = fc.serial_vector_step_cuda()
    R.floor("serial mix3 step, vector datapath (s)", vector, "registers only, started from loaded values")
    R.floor("serial mix3 step, loads in the loop (s)", fc.serial_loads_step_cuda(), "for comparison")
    empty = fc.empty_launch_cuda()
    for k, v in empty.items():
        R.floor(f"empty CUDA kernel, {k} (s)", v, "same launch path as the kernels")
    sizes = [MI] if a.quick else [MI, 16 * MI]
    triton_gather: dict[int, float] = {}
    floor_serial = serial
    if floors.TRITON:
        try:
            s_tr = floors.serial_step_floor()
            R.floor("serial mix3 step, Triton probe (s)", s_tr, "benchmarks/floors.py")
            R.floor("empty Triton kernel, eager (s)", floors.empty_launch(), "benchmarks/floors.py")
            for n in sizes:
                triton_gather[n] = floors.gather_floor(n, buf_bytes=int(a.buf_gib * (1 << 30)))
                R.floor(f"gather2 Triton probe {n // MI} Mi (s)", triton_gather[n], "benchmarks/floors.py")
            floor_serial = min(serial, s_tr)
        except Exception as exc:  # the Triton probes are a comparison; the CUDA ones suffice
            R.note(f"Triton probes failed: {type(exc).__name__}: {exc}")
        torch.cuda.empty_cache()
    R.note("write figures use the lower of the CUDA and Triton serial probes as the floor")

    def verify_section() -> None:
        world = workloads.RandomPrevRecords(int(a.buf_gib * (1 << 30)) // kc.CANARY_SLOT_BYTES, DEV)
        bench_verify(world, sizes, triton_gather, copy_bw, a.quick)

    sections: list[tuple[str, Callable[[], None]]] = [
        ("verify", verify_section), ("write", partial(bench_write, floor_serial, vector, empty, a.quick)),
        ("plan", partial(bench_plan, copy_bw, a.quick)), ("scatter", partial(bench_scatter, copy_bw, a.quick)),
        ("host", partial(bench_host, empty))]
    for name, fn in sections:  # one failing section must not hide the others' figures
        try:
            fn()
        except Exception:
            R.note(f"section {name} FAILED:\n{traceback.format_exc()}")
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    R.details["kernels"] = [{"label": k.label, "registers": k.num_regs, "local_bytes": k.local_bytes,
                             "resident_blocks": k.max_blocks} for k in loaded()]
    R.write(a.out)
    print(f"bench_cuda: {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

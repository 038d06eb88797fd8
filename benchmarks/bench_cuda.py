"""GPU benchmark of the cuda backend: every figure beside its floor, floors measured in the same run.

Usage (repository root, a CUDA GPU)::

    python benchmarks/bench_cuda.py --out bench_cuda.json [--quick]

Figures (``ratio`` = time / floor; a target of "<= 1.11" is "at least 0.9x the floor's throughput"):

- verify, real-KV off, 1 Mi and 16 Mi entries over a 2 GiB canary buffer, against the two-record random-gather
  floor (the CUDA probe, timed like the kernel, and benchmarks/floors.py's Triton probe); SGLang's launch shape
  (64 blocks x 512 threads, 8-byte field loads) and the other two combinations as comparison variants;
- verify PARTIAL (2 sources) and ALL (1 source, 128 B), against the gather floor plus the extra bytes at copy
  bandwidth, and against a probe doing the same gathers without hashing;
- write: one 32 Ki-token request against the serial mix3 floor (32 Ki steps; the registers-only probe ptxas
  runs on the uniform datapath, and the same chain from loaded values on the vector datapath), real-KV off,
  PARTIAL, ALL;
  1024 one-token requests against an empty kernel launch;
- plan: bs = 256 with 4096-token prefixes (1 Mi entries) against the bytes floor (what it must read and write
  at copy bandwidth), GPU time in a CUDA graph (and eager, for comparison); with the token pool; with an SWA
  window and LUT;
- scatter: 256 requests x 4096 tokens against its bytes floor, in a graph and eager;
- host time per eager launch of every operation: the public launcher (contract + dispatch + launch), and its
  parts, beside the GPU time of the same launch and a bare cuda.core launch of an empty kernel.

``--out`` gets one record per printed figure, as a JSON list in the schema of kvcanary/docsgen/benchmarks.py
(benchmark, case, figure, floor, unit, ratio, machine, date); everything else (floors, targets, the host
table, kernel resources, notes) goes beside it, to ``<out stem>_raw.json`` (so the GPU machine's run.sh brings
it back from $OUT; it is kept under ``benchmarks/results/raw/``). Inputs are built so
that verification passes (no ring rows), and the benchmark checks that it did.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks import floors_cuda as fc
from kvcanary.backends.cuda import plan as cplan
from kvcanary.backends.cuda import plan_entries as cplan_entries
from kvcanary.backends.cuda import plan_offsets as cplan_offsets
from kvcanary.backends.cuda import preload
from kvcanary.backends.cuda import scatter as cscatter
from kvcanary.backends.cuda import verify as cverify
from kvcanary.backends.cuda import write as cwrite
from kvcanary.backends.cuda._toolchain import cdiv, core, launch, loaded
from kvcanary.backends.torch_ref._hash import mix3, splitmix64
from kvcanary.backends.torch_ref._records import fold_sources
from kvcanary.registry import REGISTRY, Op

try:
    from benchmarks import floors as ft
except Exception:  # Triton missing: the CUDA probes still give every floor
    ft = None  # type: ignore[assignment]

MI = 1 << 20
GATHER_BYTES = 2 * 32 + 16 + 8  # what the gather floor moves per entry: two records, two indices in, 8 B out
DEV = "cuda"
RESULTS: dict[str, Any] = {"figures": {}, "floors": {}, "host": {}, "notes": []}
RECORDS: list[dict[str, Any]] = []  # one per printed figure: the schema of kvcanary/docsgen/benchmarks.py
SUMMARY: list[str] = []


def report(name: str, seconds: float, floor: float, *, unit: str = "us", what: str = "",
           target: float | None = None, **extra: Any) -> None:
    """Print one figure with its floor and ratio (and the target ratio), and keep it for the JSON."""
    scale = {"us": 1e6, "ms": 1e3, "ns": 1e9}[unit]
    ratio = seconds / floor if floor > 0 else float("nan")
    verdict = "" if target is None else ("  PASS" if ratio <= target else "  MISS") + f" (target <= {target:.2f}x)"
    line = (f"{name:<56} {seconds * scale:10.2f} {unit}   floor {floor * scale:10.2f} {unit}   "
            f"ratio {ratio:6.2f}x{verdict}  {what}")
    print(line, flush=True)
    SUMMARY.append(line)
    bench, _, case = name.partition(" ")
    RECORDS.append({"benchmark": f"cuda {bench}", "case": case, "figure": seconds * scale, "floor": floor * scale,
                    "unit": unit, "ratio": ratio, "machine": "", "date": ""})  # machine and date: filled in main
    RESULTS["figures"][name] = {"seconds": seconds, "floor_seconds": floor, "ratio": ratio, "target_ratio": target,
                                "pass": None if target is None else ratio <= target, "what": what, **extra}


def floor_value(name: str, value: float, what: str) -> None:
    RESULTS["floors"][name] = {"value": value, "what": what}
    print(f"floor  {name:<40} {value:.6g}   {what}", flush=True)


def _ctx(buf: torch.Tensor, sources: tuple[kc.RealKvSource, ...], mode: kc.RealKvHashMode, *, cpa: int = 1,
         ring: int = 1024) -> kc.VerifyOrWriteContext:
    z = torch.zeros
    return kc.VerifyOrWriteContext(
        canary_buf=buf, kernel_kind=kc.CanaryLaunchTag.TAIL_K_FULL,
        violation_ring=z(ring, 8, dtype=torch.int64, device=DEV),
        violation_write_index=z(1, dtype=torch.int32, device=DEV),
        slot_run_counter=z(1, dtype=torch.int64, device=DEV), kernel_run_counter=z(1, dtype=torch.int64, device=DEV),
        real_kv_sources=sources, real_kv_hash_mode=mode,
        enable_chain_position_assert=torch.tensor([cpa], dtype=torch.int32, device=DEV))


# -- verify ---------------------------------------------------------------------------------------------------
class VerifyWorld:
    """A 2 GiB canary buffer whose upper half chains to the lower half: slot s (upper) has predecessor p(s)
    (lower, a hash of s) and a record consistent with it, so any sample of upper slots verifies clean."""

    def __init__(self, buf_bytes: int) -> None:
        n = buf_bytes // 32
        self.n, self.half = n, n // 2
        self.rec = torch.randint(-(2**62), 2**62, (n, 4), dtype=torch.int64, device=DEV)
        self.rec[:, 3] = 0
        upper = torch.arange(self.half, n, device=DEV)
        p = self.prev_of(upper)
        self.rec[upper, 2] = mix3(self.rec[p, 2], self.rec[p, 0], self.rec[p, 1])
        self.buf = self.rec.view(torch.uint8).view(n, 32)
        torch.cuda.synchronize()

    def prev_of(self, slots: torch.Tensor) -> torch.Tensor:
        return 1 + (splitmix64(slots) & ((1 << 62) - 1)) % (self.half - 1)

    def sets(self, entries: int, count: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        g = torch.Generator(device=DEV).manual_seed(seed)
        out = []
        for _ in range(count):
            s = torch.randint(self.half, self.n, (entries,), device=DEV, generator=g)
            out.append((s, self.prev_of(s)))
        return out

    def plan(self, slots: torch.Tensor, prevs: torch.Tensor) -> kc.VerifyPlan:
        r = self.rec[slots]
        return kc.VerifyPlan(
            verify_slot_indices=slots, verify_expected_tokens=r[:, 0].contiguous(),
            verify_expected_positions=r[:, 1].contiguous(), verify_prev_slot_indices=prevs,
            verify_num_valid=torch.tensor([slots.shape[0]], dtype=torch.int32, device=DEV),
            enable=torch.ones(1, dtype=torch.int32, device=DEV))

    def stamp_real_kv(self, sources: tuple[kc.RealKvSource, ...], mode: kc.RealKvHashMode) -> None:
        upper = torch.arange(self.half, self.n, device=DEV)
        rkv, _ = fold_sources(sources, int(mode), upper)
        self.rec[upper, 3] = rkv
        torch.cuda.synchronize()


def bench_verify(world: VerifyWorld, sizes: list[int], gather_bw: dict[int, float], copy_bw: float,
                 quick: bool) -> None:
    sets_per = 4
    for n in sizes:
        sets = world.sets(n, sets_per, seed=n)
        plans = [world.plan(s, p) for s, p in sets]
        cuda_floor, unroll = fc.gather_floor_cuda_detail(world.buf, sets)
        floor_value(f"gather2 CUDA probe {n // MI} Mi", cuda_floor,
                    f"s per gather of the verify run's own records (16-byte loads, {unroll} entries/thread)")
        if ft is not None and n in gather_bw:  # the Triton probe over the very same slot/predecessor arrays
            try:
                gather_bw[n] = ft.gather_floor_for(world.buf, [s for s, _ in sets], [p for _, p in sets])
            except Exception as exc:
                RESULTS["notes"].append(f"Triton gather over the verify arrays failed: {type(exc).__name__}: {exc}")
            else:
                floor_value(f"gather2 Triton probe, verify arrays {n // MI} Mi", gather_bw[n], "benchmarks/floors.py")
        ctx = _ctx(world.buf, (), kc.RealKvHashMode.NONE)
        variants: list[tuple[str, Callable[..., None]]] = [
            ("kvcanary (auto grid x 256, 16-B loads)", partial(cverify.verify, check_verify_expected_token=False)),
            ("SGLang shape (64 x 512, 8-B loads)", partial(cverify.verify_variant, check_verify_expected_token=False,
                                                          grid=64, threads=512, vec=False)),
            ("64 x 512, 16-B loads", partial(cverify.verify_variant, check_verify_expected_token=False, grid=64,
                                            threads=512, vec=True)),
            ("auto grid x 256, 8-B loads", partial(cverify.verify_variant, check_verify_expected_token=False,
                                                  grid=None, threads=256, vec=False)),
            ("kvcanary + token check", partial(cverify.verify, check_verify_expected_token=True)),
        ]
        for label, fn in variants:
            t = fc.time_stream([partial(fn, context=ctx, plan=p) for p in plans] * 3, reps=7 if quick else 15)
            main = label.startswith("kvcanary (")
            report(f"verify NONE {n // MI} Mi: {label}", t, cuda_floor, what="vs CUDA gather probe",
                   target=1 / 0.9 if main else None, entries=n)
            if main and n in gather_bw:
                report(f"verify NONE {n // MI} Mi vs Triton gather floor", t, gather_bw[n],
                       what="benchmarks/floors.py probe over the same index arrays", target=1 / 0.9)
        torch.cuda.synchronize()
        assert int(ctx.violation_write_index[0]) == 0, "the verify benchmark must verify clean"
    # real-KV: PARTIAL over 2 sources (K and V), ALL over 1 source of 128-byte strips
    n = sizes[0] if quick else sizes[-1]
    sets = world.sets(n, sets_per, seed=7)
    plans = [world.plan(s, p) for s, p in sets]
    nbpt = 128
    srcs = [torch.randint(0, 256, (world.n, nbpt), dtype=torch.uint8, device=DEV) for _ in range(2)]
    for mode, k, chunks in ((kc.RealKvHashMode.PARTIAL, 2, 1), (kc.RealKvHashMode.ALL, 1, nbpt // 16)):
        sources = tuple(kc.RealKvSource(tensor=t, page_size=1, num_bytes_per_token=nbpt, read_bytes=nbpt)
                        for t in srcs[:k])
        world.stamp_real_kv(sources, mode)
        ctx = _ctx(world.buf, sources, mode)
        t = fc.time_stream([partial(cverify.verify, context=ctx, plan=p, check_verify_expected_token=False)
                            for p in plans] * 3, reps=7 if quick else 15)
        base = fc.gather_floor_cuda(world.buf, sets)
        extra_bytes = k * 16 * chunks  # per entry
        probe = fc.gather_rkv_floor_cuda(world.buf, sets, srcs[:k], chunks)
        name = f"verify {mode.name} {k} src x {16 * chunks} B, {n // MI} Mi"
        report(f"{name} vs gather + extra bytes at copy bw", t, base + n * extra_bytes / copy_bw, target=1 / 0.85,
               what=f"gather {base * 1e6:.0f} us + {n * extra_bytes / MI:.0f} MiB at copy bandwidth")
        report(f"{name} vs gather x bytes ratio", t, base * (GATHER_BYTES + extra_bytes) / GATHER_BYTES,
               target=1 / 0.85, what=f"extra bytes at the gather's own rate ({GATHER_BYTES}+{extra_bytes} B/entry)")
        sector_bytes = k * 32 * cdiv(16 * chunks, 32)  # a strip moves in whole 32-byte sectors
        report(f"{name} vs gather x sectors ratio", t, base * (GATHER_BYTES + sector_bytes) / GATHER_BYTES,
               target=1 / 0.85, what=f"extra bytes in whole 32-byte sectors ({GATHER_BYTES}+{sector_bytes} B/entry): "
                                     "a 16-byte strip costs a sector")
        report(f"{name} vs same-gathers probe", t, probe, what="records + strips gathered, no hashing")
        torch.cuda.synchronize()
        assert int(ctx.violation_write_index[0]) == 0, f"the {mode.name} verify benchmark must verify clean"
    del srcs
    world.rec[:, 3] = 0


# -- write ----------------------------------------------------------------------------------------------------
def _write_kwargs(ctx: kc.VerifyOrWriteContext, lens: list[int], seeds: list[int], locs: torch.Tensor,
                  positions: torch.Tensor) -> dict[str, Any]:
    offs = [0]
    for ln in lens:
        offs.append(offs[-1] + ln)
    ntok = offs[-1]
    plan = kc.WritePlan(write_offsets=torch.tensor(offs, device=DEV),
                        write_seed_slot_indices=torch.tensor(seeds, device=DEV),
                        write_num_valid_reqs=torch.tensor([len(lens)], dtype=torch.int32, device=DEV))
    return {"context": ctx, "plan": plan, "input_ids": torch.randint(0, 50000, (ntok,), device=DEV),
            "positions": positions, "out_cache_loc": locs, "enable_write_input_assert": False,
            "expected_input_tokens": None, "expected_input_positions": None}


def one_token_writes(ctx: kc.VerifyOrWriteContext, locs: torch.Tensor, reqs: int = 1024) -> dict[str, Any]:
    """Write kwargs of ``reqs`` one-token requests at slots locs[:reqs], each continuing a chain from a seed at
    locs[reqs: 2 * reqs]. The seeds are arbitrary slots, so this turns ``ctx``'s chain-position assert off."""
    ctx.enable_chain_position_assert.zero_()
    return _write_kwargs(ctx, [1] * reqs, locs[reqs: 2 * reqs].tolist(), locs[:reqs].contiguous(),
                         torch.zeros(reqs, dtype=torch.int64, device=DEV))


def bench_write(serial_floor: float, vector_floor: float, empty: dict[str, float], quick: bool) -> None:
    steps = 32 * 1024
    num_slots = 2 * steps + 8
    buf = torch.zeros(num_slots, 32, dtype=torch.uint8, device=DEV)
    locs = (torch.randperm(num_slots - 1, device=DEV) + 1)[:steps]
    kv = {nb: torch.randint(0, 256, (num_slots, nb), dtype=torch.uint8, device=DEV) for nb in (256, 2048)}
    cases: list[tuple[str, tuple[kc.RealKvSource, ...], kc.RealKvHashMode]] = [
        ("real-KV off", (), kc.RealKvHashMode.NONE),
        ("PARTIAL, 1 source", (kc.RealKvSource(tensor=kv[256], page_size=1, num_bytes_per_token=256,
                                               read_bytes=256),), kc.RealKvHashMode.PARTIAL),
        ("ALL, 1 source x 256 B", (kc.RealKvSource(tensor=kv[256], page_size=1, num_bytes_per_token=256,
                                                   read_bytes=256),), kc.RealKvHashMode.ALL),
        ("ALL, 1 source x 2 KiB", (kc.RealKvSource(tensor=kv[2048], page_size=1, num_bytes_per_token=2048,
                                                   read_bytes=2048),), kc.RealKvHashMode.ALL),
    ]
    for label, sources, mode in cases:
        ctx = _ctx(buf, sources, mode)
        kw = _write_kwargs(ctx, [steps], [-1], locs, torch.arange(steps, device=DEV))
        t = fc.time_stream([partial(cwrite.write, **kw)], reps=5 if quick else 10)
        report(f"write 1 x 32 Ki tokens, {label}", t, serial_floor * steps, unit="ms",
               target=1.15 if mode == kc.RealKvHashMode.NONE else None,
               what=f"serial mix3 floor {serial_floor * 1e9:.1f} ns/step x {steps} (uniform datapath)")
        if mode == kc.RealKvHashMode.NONE:
            report(f"write 1 x 32 Ki tokens, {label}, vs the vector-datapath chain", t, vector_floor * steps,
                   unit="ms", target=1.15,
                   what=f"mix3 chain from loaded values {vector_floor * 1e9:.1f} ns/step x {steps}")
        torch.cuda.synchronize()
        assert int(ctx.violation_write_index[0]) == 0 and int(ctx.slot_run_counter[0]) > 0
    # 1024 one-token requests, each continuing a chain (seeded)
    kw = one_token_writes(_ctx(buf, (), kc.RealKvHashMode.NONE), locs)

    def one() -> None:
        cwrite.write(**kw)

    t_eager = fc.time_stream([one] * 50, reps=10)
    t_graph = fc.time_graph(one, calls=100)
    report("write 1024 x 1 token, back-to-back eager launches", t_eager, empty["eager"], target=1.5,
           what="vs empty CUDA kernel, same launch path, back to back")
    report("write 1024 x 1 token, in a CUDA graph", t_graph, empty["graph"], target=1.5,
           what="vs empty CUDA kernel in a graph (GPU time)")
    plan = kw["plan"]
    t_dep = fc.dependent_loads_cuda(plan.write_offsets, plan.write_seed_slot_indices, kw["input_ids"],
                                    kw["out_cache_loc"], buf.view(torch.int64), warps_per_block=cwrite.WARPS)
    report("write 1024 x 1 token, in a CUDA graph, vs its dependent loads", t_graph, t_dep,
           what="a launch doing only the two dependent loads and the store of each request (graph, GPU time)")


# -- plan -----------------------------------------------------------------------------------------------------


class PlanWorld:
    """The plan benchmarks' batch: ``bs`` requests of ``prefix`` cached tokens and one new token each, with
    ``sets`` req_to_token tensors (and token pools) and plan outputs used in turn, so that a launch's traffic
    comes from DRAM (four sets of outputs are 128 MiB, more than L2 holds)."""

    def __init__(self, bs: int = 256, prefix: int = 4096, sets: int = 4, *, pools: bool = False) -> None:
        cols = prefix + 8
        self.bs, self.prefix, self.entries = bs, prefix, bs * prefix
        self.rpi = torch.arange(1, bs + 1, device=DEV)
        self.prefix_lens = torch.full((bs,), prefix, dtype=torch.int64, device=DEV)
        self.extend = torch.ones(bs, dtype=torch.int64, device=DEV)
        self.rtts = [torch.randint(1, 1 << 24, (bs + 1, cols), dtype=torch.int32, device=DEV) for _ in range(sets)]
        self.pools = [torch.randint(0, 50000, (bs + 1, cols), dtype=torch.int32, device=DEV)
                      for _ in range(sets if pools else 0)]
        self.valid = torch.full((bs,), cols, dtype=torch.int64, device=DEV)
        self.vps = [kc.VerifyPlan.allocate(verify_capacity=self.entries, device=DEV) for _ in range(sets)]
        self.wps = [kc.WritePlan.allocate(write_req_capacity=bs, device=DEV) for _ in range(sets)]

    def kwargs(self, i: int, *, pool: bool = False, window: int = 0, lut: torch.Tensor | None = None,
               **over: Any) -> dict[str, Any]:
        """Keyword arguments of a fused plan over set ``i`` (``over`` replaces any of them)."""
        kw = {"verify_plan_out": self.vps[i], "write_plan_out": self.wps[i], "req_pool_indices": self.rpi,
              "prefix_lens": self.prefix_lens, "extend_seq_lens": self.extend, "req_to_token": self.rtts[i],
              "swa_window_size": window, "full_to_swa_index_mapping": lut if window else None,
              "verify_capacity": self.entries, "req_to_verify_expected_tokens": self.pools[i] if pool else None,
              "req_to_verify_expected_tokens_valid_lens": self.valid if pool else None,
              "kv_token_id_vs_position_offset": 0}
        kw.update(over)
        return kw


def bench_plan(copy_bw: float, quick: bool) -> None:
    world = PlanWorld(pools=True)
    bs, prefix, sets, entries = world.bs, world.prefix, len(world.rtts), world.entries
    rpi, prefix_t, extend, rtts, vps, wps = (world.rpi, world.prefix_lens, world.extend, world.rtts, world.vps,
                                             world.wps)
    lut = torch.randint(0, 1 << 24, (1 << 24,), dtype=torch.int64, device=DEV) if not quick else None

    def kwargs(i: int, *, pool: bool, window: int) -> dict[str, Any]:
        return world.kwargs(i, pool=pool, window=window, lut=lut)

    cases = [("bs=256 x 4096 prefix", False, 0), ("bs=256 x 4096 prefix + token pool", True, 0)]
    if lut is not None:
        cases.append(("bs=256, SWA window 1024 + LUT", False, 1024))
    for label, pool, window in cases:
        kws = [kwargs(i, pool=pool, window=window) for i in range(sets)]
        n = bs * (window if window else prefix)
        fns = [partial(cplan.plan, **kw) for kw in kws]
        t = fc.rotating_graph(fns)
        t_eager = fc.time_stream(fns * 3, reps=7 if quick else 15)
        per_entry = 4 + 32 + (4 if pool else 0) + (8 if window else 0)  # rtt read, 4 outputs, pool, LUT
        nbytes = n * per_entry + bs * (24 + 16 + 8 + (8 if pool else 0)) + 16
        report(f"plan {label}", t, nbytes / copy_bw, target=1.15 if not pool and not window else None,
               what=f"in a CUDA graph: {nbytes / MI:.1f} MiB at copy bandwidth ({n} entries)")
        report(f"plan {label}, eager back to back", t_eager, nbytes / copy_bw,
               what="host-bound when the kernel is shorter than a launch (see the host table)")
        torch.cuda.synchronize()
        assert int(vps[0].enable[0]) == 1 and int(vps[0].verify_num_valid[0]) == n
        if not pool and not window:
            streams = fc.plan_stream_cuda(n, sets)
            best = min(streams, key=streams.__getitem__)
            tried = ", ".join(f"{k} {v * 1e6:.2f} us" for k, v in streams.items())
            report(f"plan {label} vs a plain stream of its traffic", t, streams[best],
                   what=f"probe kvc_probe_stream_plan {best} (of {tried}), same rotation")
    # rows that are no multiple of the 4096-entry tile: each row's last tile is partial
    odd = PlanWorld(prefix=4000)
    fns = [partial(cplan.plan, **odd.kwargs(i)) for i in range(sets)]
    nbytes = odd.entries * 36 + bs * 48 + 16
    report("plan bs=256 x 4000 prefix (rows no multiple of a tile)", fc.rotating_graph(fns), nbytes / copy_bw,
           what=f"in a CUDA graph: {nbytes / MI:.1f} MiB at copy bandwidth ({odd.entries} entries)")
    torch.cuda.synchronize()
    assert int(odd.vps[0].enable[0]) == 1 and int(odd.vps[0].verify_num_valid[0]) == odd.entries
    del odd, fns
    # the two stages as separate launches, for comparison
    kw = kwargs(0, pool=False, window=0)
    scratch = vps[0].verify_offsets_scratch
    assert scratch is not None
    off_kw: dict[str, Any] = {
              "req_pool_indices": rpi, "prefix_lens": prefix_t, "extend_seq_lens": extend, "req_to_token": rtts[0],
              "full_to_swa_index_mapping": None, "out_verify_offsets_scratch": scratch,
              "out_write_offsets": wps[0].write_offsets, "out_write_seed_slot_indices": wps[0].write_seed_slot_indices,
              "out_verify_num_valid": vps[0].verify_num_valid, "out_verify_enable": vps[0].enable,
              "out_write_num_valid_reqs": wps[0].write_num_valid_reqs, "swa_window_size": 0,
              "verify_capacity": entries}
    ent_kw: dict[str, Any] = {"req_pool_indices": rpi, "prefix_lens": prefix_t, "req_to_token": rtts[0],
              "full_to_swa_index_mapping": None, "verify_offsets_scratch": scratch, "verify_enable": vps[0].enable,
              "req_to_verify_expected_tokens": None, "req_to_verify_expected_tokens_valid_lens": None,
              "out_verify_slot_indices": vps[0].verify_slot_indices,
              "out_verify_expected_tokens": vps[0].verify_expected_tokens,
              "out_verify_expected_positions": vps[0].verify_expected_positions,
              "out_verify_prev_slot_indices": vps[0].verify_prev_slot_indices, "kv_token_id_vs_position_offset": 0,
              "swa_window_size": 0}
    del kw

    def two() -> None:
        cplan_offsets.plan_offsets(**off_kw)
        cplan_entries.plan_entries(**ent_kw)

    t = fc.time_stream([two] * 6, reps=7 if quick else 15)
    report("plan bs=256 x 4096 as offsets + entries launches", t, (entries * 36 + bs * 48) / copy_bw,
           what="two launches (no rotation: L2-warm inputs)")


def bench_scatter(copy_bw: float, quick: bool) -> None:
    bs, per = 256, 4096
    flat = torch.randint(0, 1 << 40, (bs * per,), device=DEV)
    offsets = torch.arange(0, bs * per + 1, per, device=DEV)
    rpi = torch.arange(1, bs + 1, device=DEV)
    pools = [torch.zeros(bs + 1, per, dtype=torch.int32, device=DEV) for _ in range(4)]
    fns = [partial(cscatter.scatter_req_token_ids, flat_in=flat, offsets=offsets, req_pool_indices=rpi, pool_out=p)
           for p in pools]
    report("scatter 256 x 4096 tokens", fc.rotating_graph(fns), bs * per * 12 / copy_bw,
           what="in a CUDA graph: 8 B read + 4 B written per token at copy bandwidth")
    report("scatter 256 x 4096 tokens, eager back to back", fc.time_stream(fns * 3, reps=7 if quick else 15),
           bs * per * 12 / copy_bw, what="host-bound when the kernel is shorter than a launch")


# -- host overhead --------------------------------------------------------------------------------------------
def _tiny_calls() -> dict[Op, tuple[Any, dict[str, Any], Callable[..., Any]]]:
    """(backend module, kwargs, contract check) of a small launch of each operation."""
    from kvcanary.contract.plan import check_plan
    from kvcanary.contract.plan_entries import check_plan_entries
    from kvcanary.contract.plan_offsets import check_plan_offsets
    from kvcanary.contract.scatter import check_scatter
    from kvcanary.contract.verify import check_verify
    from kvcanary.contract.write import check_write

    buf = torch.zeros(1024, 32, dtype=torch.uint8, device=DEV)
    ctx = _ctx(buf, (), kc.RealKvHashMode.NONE, cpa=0)
    vp = kc.VerifyPlan.allocate(verify_capacity=1024, device=DEV)
    vp.verify_slot_indices.zero_()  # slot 0 entries: processed, never reported
    vp.verify_num_valid.fill_(64)
    vp.enable.fill_(1)
    wkw = _write_kwargs(ctx, [1] * 4, [-1] * 4, torch.arange(1, 5, device=DEV), torch.zeros(4, dtype=torch.int64,
                                                                                           device=DEV))
    wp = kc.WritePlan.allocate(write_req_capacity=8, device=DEV)
    pvp = kc.VerifyPlan.allocate(verify_capacity=1024, device=DEV)  # the plan operations' own (verify's stays clean)
    r2t = torch.randint(1, 1000, (9, 64), dtype=torch.int32, device=DEV)
    pkw = {"verify_plan_out": pvp, "write_plan_out": wp, "req_pool_indices": torch.arange(1, 5, device=DEV),
           "prefix_lens": torch.full((4,), 16, device=DEV), "extend_seq_lens": torch.ones(4, dtype=torch.int64,
                                                                                       device=DEV),
           "req_to_token": r2t, "swa_window_size": 0, "full_to_swa_index_mapping": None, "verify_capacity": 1024,
           "req_to_verify_expected_tokens": None, "req_to_verify_expected_tokens_valid_lens": None,
           "kv_token_id_vs_position_offset": 0}
    vp_scratch = pvp.verify_offsets_scratch
    assert vp_scratch is not None
    okw = {"req_pool_indices": pkw["req_pool_indices"], "prefix_lens": pkw["prefix_lens"],
           "extend_seq_lens": pkw["extend_seq_lens"], "req_to_token": r2t, "full_to_swa_index_mapping": None,
           "out_verify_offsets_scratch": vp_scratch, "out_write_offsets": wp.write_offsets,
           "out_write_seed_slot_indices": wp.write_seed_slot_indices, "out_verify_num_valid": pvp.verify_num_valid,
           "out_verify_enable": pvp.enable, "out_write_num_valid_reqs": wp.write_num_valid_reqs,
           "swa_window_size": 0, "verify_capacity": 1024}
    ekw = {"req_pool_indices": pkw["req_pool_indices"], "prefix_lens": pkw["prefix_lens"], "req_to_token": r2t,
           "full_to_swa_index_mapping": None, "verify_offsets_scratch": vp_scratch,
           "verify_enable": pvp.enable, "req_to_verify_expected_tokens": None,
           "req_to_verify_expected_tokens_valid_lens": None, "out_verify_slot_indices": pvp.verify_slot_indices,
           "out_verify_expected_tokens": pvp.verify_expected_tokens,
           "out_verify_expected_positions": pvp.verify_expected_positions,
           "out_verify_prev_slot_indices": pvp.verify_prev_slot_indices, "kv_token_id_vs_position_offset": 0,
           "swa_window_size": 0}
    skw = {"flat_in": torch.arange(64, device=DEV), "offsets": torch.tensor([0, 16, 32, 48, 64], device=DEV),
           "req_pool_indices": torch.arange(1, 5, device=DEV), "pool_out": torch.zeros(8, 64, dtype=torch.int32,
                                                                                      device=DEV)}
    vkw = {"context": ctx, "plan": vp, "check_verify_expected_token": False}
    return {
        Op.VERIFY: (cverify, vkw, check_verify), Op.WRITE: (cwrite, wkw, check_write),
        Op.PLAN: (cplan, pkw, check_plan), Op.PLAN_OFFSETS: (cplan_offsets, okw, check_plan_offsets),
        Op.PLAN_ENTRIES: (cplan_entries, ekw, check_plan_entries), Op.SCATTER: (cscatter, skw, check_scatter),
    }


def bench_host(empty: dict[str, float]) -> None:
    from kvcanary.testing.parity import launcher

    device = torch.device(DEV, torch.cuda.current_device())
    rows = []
    for op, (mod, kw, check) in _tiny_calls().items():
        impl = REGISTRY.get("cuda").implementation(op)
        pub = launcher(op)
        key, sizes, args = mod.pack(**kw)
        kernel = mod.KERNELS.get(device.index, key)
        shape = mod.shape(key, sizes, kernel.max_blocks)
        cc = core()
        stream = cc.Stream.from_handle(int(torch.cuda.current_stream().cuda_stream))
        cfg = cc.LaunchConfig(grid=shape[0] if shape[1] == 1 else (shape[0], shape[1], 1), block=shape[2],
                              shmem_size=shape[3])
        r: dict[str, float] = {
            "public_launcher": fc.host_time(partial(pub, **kw, backend="cuda")),
            "contract_check": fc.host_time(partial(check, **kw)),
            "registry_select": fc.host_time(partial(REGISTRY.select, op, device, "cuda", kw)),
            "backend_impl": fc.host_time(partial(impl, **kw)),
            "pack_only": fc.host_time(partial(mod.pack, **kw)),
            "toolchain_launch": fc.host_time(partial(launch, kernel, device.index, shape, args)),
            "bare_cuda_core_launch": fc.host_time(partial(cc.launch, stream, cfg, kernel.kernel, *args)),
            "gpu_time_in_graph": fc.time_graph(partial(impl, **kw), calls=50),
            "num_args": len(args),
        }
        RESULTS["host"][op.value] = r
        rows.append((op.value, r))
    hdr = (f"{'host us per eager launch':<24}{'launcher':>10}{'contract':>10}{'select':>9}{'impl':>9}{'pack':>8}"
           f"{'launch':>9}{'bare':>8}{'GPU':>8}{'args':>6}")
    lines = [hdr]
    for name, r in rows:
        lines.append(f"{name:<24}{r['public_launcher'] * 1e6:10.2f}{r['contract_check'] * 1e6:10.2f}"
                     f"{r['registry_select'] * 1e6:9.2f}{r['backend_impl'] * 1e6:9.2f}{r['pack_only'] * 1e6:8.2f}"
                     f"{r['toolchain_launch'] * 1e6:9.2f}{r['bare_cuda_core_launch'] * 1e6:8.2f}"
                     f"{r['gpu_time_in_graph'] * 1e6:8.2f}{r['num_args']:6d}")
    lines.append(f"{'empty kernel':<24}{'':>10}{'':>10}{'':>9}{'':>9}{'':>8}{'':>9}{empty['host'] * 1e6:8.2f}"
                 f"{empty['graph'] * 1e6:8.2f}{1:6d}")
    print("\n".join(lines), flush=True)
    SUMMARY.extend(lines)


# -- main -----------------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench_cuda.json", help="JSON results file")
    ap.add_argument("--quick", action="store_true", help="1 Mi verify only, fewer repetitions")
    ap.add_argument("--buf-gib", type=float, default=2.0, help="canary buffer size for verify (GiB)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_cuda: no CUDA device")
        return 2
    t0 = time.time()
    props = torch.cuda.get_device_properties(0)
    cc = core()
    RESULTS["device"] = {"name": props.name, "capability": list(torch.cuda.get_device_capability(0)),
                         "sms": props.multi_processor_count, "torch": torch.__version__,
                         "cuda": torch.version.cuda, "cuda.core": getattr(cc, "__version__", "?"),
                         "python": platform.python_version()}
    print(f"bench_cuda on {props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs), "
          f"torch {torch.__version__}, cuda.core {RESULTS['device']['cuda.core']}", flush=True)
    t = time.time()
    n_specs = preload(DEV)
    print(f"compiled and loaded {n_specs} specializations in {time.time() - t:.1f} s", flush=True)

    # floors, measured now
    copy_bw: float | None = None
    if ft is not None:
        try:
            copy_bw = ft.copy_bandwidth()
        except Exception as exc:  # the Triton probes are a comparison; the CUDA ones suffice
            RESULTS["notes"].append(f"Triton probes failed: {type(exc).__name__}: {exc}")
            ft_ok = False
        else:
            ft_ok = True
    else:
        ft_ok = False
    if copy_bw is None:
        copy_bw = fc.copy_bandwidth_cuda()
    floor_value("copy bandwidth (B/s, read + written)", copy_bw, "device-to-device copy")
    serial = fc.serial_step_floor_cuda()
    floor_value("serial mix3 step, CUDA probe (s)", serial, "registers only")
    vector = fc.serial_vector_step_cuda()
    floor_value("serial mix3 step, vector datapath (s)", vector, "registers only, started from loaded values")
    floor_value("serial mix3 step, loads in the loop (s)", fc.serial_loads_step_cuda(), "for comparison")
    empty = fc.empty_launch_cuda()
    for k, v in empty.items():
        floor_value(f"empty CUDA kernel, {k} (s)", v, "same launch path as the kernels")
    sizes = [MI] if a.quick else [MI, 16 * MI]
    triton_gather: dict[int, float] = {}
    if ft is not None and ft_ok:
        s_tr = ft.serial_step_floor()
        floor_value("serial mix3 step, Triton probe (s)", s_tr, "benchmarks/floors.py")
        floor_value("empty Triton kernel, eager (s)", ft.empty_launch(), "benchmarks/floors.py")
        for n in sizes:
            triton_gather[n] = ft.gather_floor(n, buf_bytes=int(a.buf_gib * (1 << 30)))
            floor_value(f"gather2 Triton probe {n // MI} Mi (s)", triton_gather[n], "benchmarks/floors.py")
        torch.cuda.empty_cache()
    floor_serial = serial
    if ft is not None and ft_ok:
        floor_serial = min(serial, RESULTS["floors"]["serial mix3 step, Triton probe (s)"]["value"])
    RESULTS["notes"].append("write figures use the lower of the CUDA and Triton serial probes as the floor")

    bw = copy_bw

    def verify_section() -> None:
        world = VerifyWorld(int(a.buf_gib * (1 << 30)))
        bench_verify(world, sizes, triton_gather, bw, a.quick)

    sections: list[tuple[str, Callable[[], None]]] = [
        ("verify", verify_section), ("write", partial(bench_write, floor_serial, vector, empty, a.quick)),
        ("plan", partial(bench_plan, bw, a.quick)), ("scatter", partial(bench_scatter, bw, a.quick)),
        ("host", partial(bench_host, empty))]
    for name, fn in sections:  # one failing section must not hide the others' figures
        try:
            fn()
        except Exception:
            import traceback

            msg = f"section {name} FAILED:\n{traceback.format_exc()}"
            print(msg, flush=True)
            SUMMARY.append(f"section {name} FAILED (see the log)")
            RESULTS["notes"].append(msg)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    RESULTS["kernels"] = [{"label": k.label, "registers": k.num_regs, "local_bytes": k.local_bytes,
                           "resident_blocks": k.max_blocks} for k in loaded()]
    machine = f"1x {props.name}, CUDA {torch.version.cuda}"
    date = time.strftime("%Y-%m-%d", time.gmtime())
    for rec in RECORDS:
        rec["machine"], rec["date"] = machine, date
    out = Path(a.out)
    out.write_text(json.dumps(RECORDS, indent=2, default=float))
    raw = out.with_name(f"{out.stem}_raw.json")
    raw.write_text(json.dumps(RESULTS, indent=2, default=float))
    print("\n=== summary (time, floor, time/floor) ===")
    print("\n".join(SUMMARY))
    misses = [k for k, v in RESULTS["figures"].items() if v["pass"] is False]
    print(f"\n{len(RESULTS['figures'])} figures, {len(misses)} below target: {misses}")
    print(f"bench_cuda: {time.time() - t0:.0f} s, results in {a.out} (figures), {raw} (everything else)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The triton backend on a GPU: each figure beside its hardware floor (measured in the same run) and the ratio.

Figures (targets of issue 4):

- verify of 1 Mi and 16 Mi entries over a 2 GiB canary buffer (64 Mi slots, clean chains: no violations), in
  two layouts: *chained* (the plan a real batch gives: 4096-token chains over random slots, so each entry's
  predecessor is the previous entry's slot, a cache hit) and *random* (independent random slots and
  predecessors, like ``bench_cuda.py``'s VerifyWorld: two cold records per entry). The floor is
  ``floors.gather_floor_for`` over the *same* slot and predecessor arrays (the records verify reads, 16 B
  of indices in, 8 B out: 88 B per entry when both records are cold), so a layout's cache behaviour helps
  figure and floor alike. Real-KV off: time <= floor / 0.75. PARTIAL / ALL (one source of 128-byte strips):
  <= floor / 0.7, the floor scaled by the sectors each entry also reads (PARTIAL one 32-byte sector, ALL
  four): ``gather_floor_for * (88 + extra) / 88``. The old independent two-record ``gather_floor`` is
  printed for reference.
- write of one 32 Ki-token request: <= 1.5x the serial mix3 step floor per token (``serial_step_floor``),
  real-KV off and PARTIAL.
- write of 1024 one-token requests (decode; seeds in range, chain-position assert on): <= 2x one eager empty
  launch (``empty_launch``), through the public launcher and with the op called directly.
- plan with bs = 256 and 4096-token prefixes (1 Mi entries): <= 1.3x the bytes floor, (entries x 32 B written +
  req_to_token read, 4 B per entry) at device copy bandwidth (``copy_bandwidth``).

Every figure is taken twice: replayed from a CUDA graph (how an engine runs the canary; no host work) and
launched eagerly (host overhead included when it exceeds the GPU time). The ratio judged against the target
is the graph one for verify and plan, the eager one for the decode write (its floor is an eager launch);
both are printed and recorded. Verify rotates several index sets, like its floor, so that the plan arrays do
not sit in L2 between repetitions.

``--out`` gets a JSON list of ``{benchmark, case, figure, floor, unit, ratio, machine, date}`` records (the
schema of ``kvcanary/docsgen/benchmarks.py``), one per printed figure; the details (targets, floors, tuning,
sweeps, versions) go to ``--raw`` (default ``<out dir>/raw/<out name>.<date>.json``).

Usage::

    python benchmarks/bench_triton.py --out results/bench_triton.json            # figures + floors
    python benchmarks/bench_triton.py --out results/bench_triton.json --sweep    # also other launch shapes
    python benchmarks/bench_triton.py --only plan,write                          # some sections only
    TRITON_INTERPRET=1 python benchmarks/bench_triton.py --dry-run               # CPU: set-ups only, tiny
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from kvcanary.backends.triton import write as triton_write
from kvcanary.backends.triton._jit import TUNING

if "triton" not in kc.registered_backends():  # a checkout that is not pip-installed has no entry-point metadata
    from kvcanary.backends.triton import BACKEND as _TRITON

    kc.register_backend(_TRITON)

MI = 1 << 20
KV_BYTES = 128  # strip of the benchmark's real-KV source (ALL reads all of it: four 32-byte sectors)
RECORD_BYTES = 88  # per verify entry in the gather floor: 2 x 32 B records + 16 B indices + 8 B out
SECTIONS = ("verify", "write", "plan")


@dataclass
class Figure:
    name: str
    seconds: float
    floor: float
    target: float  # the ratio figure / floor must not exceed this
    how: str  # "graph" or "eager"
    what: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    benchmark: str = "triton"
    unit: str = "us"

    @property
    def ratio(self) -> float:
        return self.seconds / self.floor

    def row(self) -> dict[str, Any]:
        return {"name": self.name, "how": self.how, "seconds": self.seconds, "floor_seconds": self.floor,
                "ratio": self.ratio, "target_ratio": self.target, "meets_target": self.ratio <= self.target,
                "what": self.what, **self.extra}

    def record(self, machine: str, day: str) -> dict[str, Any]:
        """The docs' BenchmarkResult: figure and floor in ``unit``."""
        scale = {"us": 1e6, "us/token": 1e6, "ns/token": 1e9}[self.unit]
        return {"benchmark": self.benchmark, "case": f"{self.name} [{self.how}]", "figure": self.seconds * scale,
                "floor": self.floor * scale, "unit": self.unit, "ratio": self.ratio, "machine": machine,
                "date": day}


# -- timing ---------------------------------------------------------------------------------------------------
def graph_of(fn: Callable[[], None]) -> torch.cuda.CUDAGraph:
    """``fn`` captured once (after an eager warm-up call that compiles its kernels)."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def timed_pair(fns: list[Callable[[], None]], reps: int = 30) -> tuple[float, float]:
    """(graph replay, eager) median seconds of one call, rotating over ``fns`` (distinct input sets)."""
    from benchmarks.floors import time_cuda

    graphs = [graph_of(f) for f in fns]
    k = [0, 0]

    def replay() -> None:
        graphs[k[0] % len(graphs)].replay()
        k[0] += 1

    def eager() -> None:
        fns[k[1] % len(fns)]()
        k[1] += 1

    return time_cuda(replay, reps=reps), time_cuda(eager, reps=reps)


@contextmanager
def tuning(**over: int) -> Iterator[None]:
    old = {k: TUNING[k] for k in over}
    TUNING.update(over)
    try:
        yield
    finally:
        TUNING.update(old)


# -- set-ups (device-agnostic: --dry-run runs them tiny on the CPU) -------------------------------------------
def context(buf: torch.Tensor, mode: kc.RealKvHashMode, kv: torch.Tensor | None, ring: int = 1024
            ) -> kc.VerifyOrWriteContext:
    dev = buf.device
    sources = () if kv is None else (kc.RealKvSource(tensor=kv, page_size=1, num_bytes_per_token=KV_BYTES,
                                                     read_bytes=KV_BYTES),)
    return kc.VerifyOrWriteContext(
        canary_buf=buf, kernel_kind=kc.CanaryLaunchTag.TAIL_K_FULL,
        violation_ring=torch.zeros(ring, 8, dtype=torch.int64, device=dev),
        violation_write_index=torch.zeros(1, dtype=torch.int32, device=dev),
        slot_run_counter=torch.zeros(1, dtype=torch.int64, device=dev),
        kernel_run_counter=torch.zeros(1, dtype=torch.int64, device=dev),
        real_kv_sources=sources, real_kv_hash_mode=mode,
        enable_chain_position_assert=torch.ones(1, dtype=torch.int32, device=dev))


def write_plan(dev: torch.device, offsets: torch.Tensor, seeds: torch.Tensor) -> kc.WritePlan:
    return kc.WritePlan(write_offsets=offsets.to(dev), write_seed_slot_indices=seeds.to(dev),
                        write_num_valid_reqs=torch.tensor([seeds.shape[0]], dtype=torch.int32, device=dev))


def stamp_chains(ctx: kc.VerifyOrWriteContext, slots: torch.Tensor, length: int) -> kc.VerifyPlan:
    """Write ``slots`` as chains of ``length`` tokens (one request each); return the plan verifying them."""
    dev = slots.device
    n = slots.shape[0]
    reqs = n // length
    e = torch.arange(n, device=dev)
    pos = e % length
    kc.launch_canary_write_kernel(
        context=ctx, plan=write_plan(dev, torch.arange(reqs + 1, device=dev) * length,
                                     torch.full((reqs,), -1, dtype=torch.int64, device=dev)),
        input_ids=(e * 7919) % 50021, positions=pos, out_cache_loc=slots, enable_write_input_assert=False,
        expected_input_tokens=None, expected_input_positions=None, backend="triton")
    prev = torch.where(pos == 0, -1, torch.roll(slots, 1))
    return kc.VerifyPlan(verify_slot_indices=slots, verify_expected_tokens=torch.full_like(slots, -1),
                         verify_expected_positions=pos, verify_prev_slot_indices=prev.contiguous(),
                         verify_num_valid=torch.tensor([n], dtype=torch.int32, device=dev),
                         enable=torch.ones(1, dtype=torch.int32, device=dev))


@dataclass
class VerifySetup:
    calls: list[Callable[[], None]]
    ctx: kc.VerifyOrWriteContext
    plans: list[kc.VerifyPlan] = field(default_factory=list)

    def floor(self) -> float:
        """``floors.gather_floor_for`` over exactly the records these plans make verify read."""
        from benchmarks.floors import gather_floor_for

        return gather_floor_for(self.ctx.canary_buf, [p.verify_slot_indices for p in self.plans],
                                [p.verify_prev_slot_indices for p in self.plans])


def _verify_calls(ctx: kc.VerifyOrWriteContext, plans: list[kc.VerifyPlan]) -> VerifySetup:
    def call(plan: kc.VerifyPlan) -> Callable[[], None]:
        return lambda: kc.launch_canary_verify_kernel(context=ctx, plan=plan, check_verify_expected_token=False,
                                                      backend="triton")

    return VerifySetup([call(p) for p in plans], ctx, plans)


def verify_setup(dev: torch.device, *, num_slots: int, n: int, sets: int, mode: kc.RealKvHashMode,
                 length: int = 4096) -> VerifySetup:
    buf = torch.zeros(num_slots, kc.CANARY_SLOT_BYTES, dtype=torch.uint8, device=dev)
    kv = None
    if mode != kc.RealKvHashMode.NONE:
        kv = torch.randint(0, 256, (num_slots, KV_BYTES), dtype=torch.uint8, device=dev)
    ctx = context(buf, mode, kv)
    perm = torch.randperm(num_slots - 1, device=dev) + 1
    length = min(length, n)
    plans = [stamp_chains(ctx, perm[k * n : (k + 1) * n].contiguous(), length) for k in range(sets)]
    ctx.kernel_run_counter.zero_()
    ctx.slot_run_counter.zero_()
    return _verify_calls(ctx, plans)


def random_verify_setup(dev: torch.device, *, num_slots: int, n: int, sets: int, mode: kc.RealKvHashMode,
                        seed: int = 0) -> VerifySetup:
    """Independent random slots and predecessors (``bench_cuda.py``'s VerifyWorld): a slot of the upper half
    of the buffer chains to ``p(s)`` in the lower half (a hash of ``s``, so every set agrees); records are
    random, the verified slots' chain hashes and real-KV hashes are stamped consistent (torch_ref's hashing)."""
    from kvcanary.backends.torch_ref._hash import mix3, splitmix64
    from kvcanary.backends.torch_ref._records import fold_sources

    buf = torch.zeros(num_slots, kc.CANARY_SLOT_BYTES, dtype=torch.uint8, device=dev)
    rec = buf.view(torch.int64)
    half = num_slots // 2
    g = torch.Generator(device=dev).manual_seed(seed)
    rec[:, :3] = torch.randint(-(2**62), 2**62, (num_slots, 3), dtype=torch.int64, device=dev, generator=g)
    kv = None
    if mode != kc.RealKvHashMode.NONE:
        kv = torch.randint(0, 256, (num_slots, KV_BYTES), dtype=torch.uint8, device=dev, generator=g)
    ctx = context(buf, mode, kv)
    plans = []
    for _ in range(sets):
        s = torch.randint(half, num_slots, (n,), device=dev, generator=g)
        p = 1 + (splitmix64(s) & ((1 << 62) - 1)) % (half - 1)
        rec[s, 2] = mix3(rec[p, 2], rec[p, 0], rec[p, 1])
        if mode != kc.RealKvHashMode.NONE:
            rec[s, 3] = fold_sources(ctx.real_kv_sources, int(mode), s)[0]
        plans.append(kc.VerifyPlan(
            verify_slot_indices=s, verify_expected_tokens=torch.full_like(s, -1),
            verify_expected_positions=rec[s, 1].contiguous(), verify_prev_slot_indices=p.contiguous(),
            verify_num_valid=torch.tensor([n], dtype=torch.int32, device=dev),
            enable=torch.ones(1, dtype=torch.int32, device=dev)))
    return _verify_calls(ctx, plans)


def long_write_setup(dev: torch.device, *, num_slots: int, tokens: int, mode: kc.RealKvHashMode
                     ) -> tuple[Callable[[], None], kc.VerifyOrWriteContext]:
    buf = torch.zeros(num_slots, kc.CANARY_SLOT_BYTES, dtype=torch.uint8, device=dev)
    kv = None if mode == kc.RealKvHashMode.NONE else torch.randint(0, 256, (num_slots, KV_BYTES),
                                                                      dtype=torch.uint8, device=dev)
    ctx = context(buf, mode, kv)
    slots = (torch.randperm(num_slots - 1, device=dev) + 1)[:tokens].contiguous()
    e = torch.arange(tokens, device=dev)
    plan = write_plan(dev, torch.tensor([0, tokens], dtype=torch.int64), torch.tensor([-1], dtype=torch.int64))
    ids = (e * 7919) % 50021

    def call() -> None:
        kc.launch_canary_write_kernel(context=ctx, plan=plan, input_ids=ids, positions=e, out_cache_loc=slots,
                                      enable_write_input_assert=False, expected_input_tokens=None,
                                      expected_input_positions=None, backend="triton")

    return call, ctx


def decode_write_setup(dev: torch.device, *, num_slots: int, reqs: int
                       ) -> tuple[Callable[[], None], Callable[[], None], kc.VerifyOrWriteContext]:
    """``reqs`` one-token requests continuing chains whose heads sit in other slots (position 0 → 1)."""
    buf = torch.zeros(num_slots, kc.CANARY_SLOT_BYTES, dtype=torch.uint8, device=dev)
    ctx = context(buf, kc.RealKvHashMode.NONE, None)
    perm = torch.randperm(num_slots - 1, device=dev) + 1
    heads, slots = perm[:reqs].contiguous(), perm[reqs : 2 * reqs].contiguous()
    offsets = torch.arange(reqs + 1, dtype=torch.int64)
    ids = torch.arange(reqs, device=dev) + 11
    kc.launch_canary_write_kernel(
        context=ctx, plan=write_plan(dev, offsets, torch.full((reqs,), -1, dtype=torch.int64)), input_ids=ids,
        positions=torch.zeros(reqs, dtype=torch.int64, device=dev), out_cache_loc=heads,
        enable_write_input_assert=False, expected_input_tokens=None, expected_input_positions=None,
        backend="triton")
    plan = write_plan(dev, offsets, heads.cpu())
    ones = torch.ones(reqs, dtype=torch.int64, device=dev)
    kw: dict[str, Any] = {"context": ctx, "plan": plan, "input_ids": ids, "positions": ones, "out_cache_loc": slots,
                          "enable_write_input_assert": False, "expected_input_tokens": None,
                          "expected_input_positions": None}

    def launcher() -> None:
        kc.launch_canary_write_kernel(**kw, backend="triton")

    def direct() -> None:
        triton_write.write(**kw)

    return launcher, direct, ctx


def plan_setup(dev: torch.device, *, bs: int, prefix: int, num_slots: int, pool: bool
               ) -> tuple[Callable[[], None], kc.VerifyPlan, int]:
    r2t = torch.randint(1, num_slots, (bs + 1, prefix + 8), dtype=torch.int32, device=dev)
    rpi = torch.arange(1, bs + 1, device=dev)
    prefix_lens = torch.full((bs,), prefix, dtype=torch.int64, device=dev)
    extend = torch.ones(bs, dtype=torch.int64, device=dev)
    total = bs * prefix
    vp = kc.VerifyPlan.allocate(verify_capacity=total, device=dev)
    wp = kc.WritePlan.allocate(write_req_capacity=bs, device=dev)
    tokens = torch.randint(0, 50000, (bs + 1, prefix + 8), dtype=torch.int32, device=dev) if pool else None
    valid = torch.full((bs,), prefix + 8, dtype=torch.int64, device=dev) if pool else None

    def call() -> None:
        kc.launch_canary_plan_kernels(
            verify_plan_out=vp, write_plan_out=wp, req_pool_indices=rpi, prefix_lens=prefix_lens,
            extend_seq_lens=extend, req_to_token=r2t, swa_window_size=0, full_to_swa_index_mapping=None,
            verify_capacity=total, req_to_verify_expected_tokens=tokens,
            req_to_verify_expected_tokens_valid_lens=valid, kv_token_id_vs_position_offset=0, backend="triton")

    return call, vp, total


def _clean(ctx: kc.VerifyOrWriteContext, what: str) -> None:
    n = int(ctx.violation_write_index[0])
    if n:
        raise RuntimeError(f"bench_triton: {what} recorded {n} violations; the set-up should be clean")


# -- the run --------------------------------------------------------------------------------------------------
def dry_run() -> int:
    """Every set-up, tiny, one call each, on whatever device the backend runs (CPU: the interpreter)."""
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for mode in kc.RealKvHashMode:
        for layout in (verify_setup, random_verify_setup):
            v = layout(dev, num_slots=4096, n=256, sets=2, mode=mode, **({"length": 64} if layout is verify_setup
                                                                           else {}))
            for c in v.calls:
                c()
            _clean(v.ctx, f"verify {mode.name} ({layout.__name__})")
            assert int(v.ctx.slot_run_counter[0]) == 512
        call, ctx = long_write_setup(dev, num_slots=4096, tokens=100, mode=mode)
        call()
        call()
        _clean(ctx, "long write")
    launcher, direct, ctx = decode_write_setup(dev, num_slots=4096, reqs=16)
    launcher()
    direct()
    _clean(ctx, "decode write")
    call, vp, total = plan_setup(dev, bs=4, prefix=50, num_slots=4096, pool=True)
    call()
    assert int(vp.verify_num_valid[0]) == total and int(vp.enable[0]) == 1
    print("bench_triton --dry-run: every set-up ran clean")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the figures here: a JSON list of benchmark records")
    ap.add_argument("--raw", type=Path, help="write the details here (default: <out dir>/raw/<out name>.<date>.json)")
    ap.add_argument("--sweep", action="store_true", help="also time alternative launch shapes (TUNING)")
    ap.add_argument("--dry-run", action="store_true", help="run the set-ups tiny, untimed (works on the CPU)")
    ap.add_argument("--quick", action="store_true", help="skip the 16 Mi verify figures")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    a = ap.parse_args()
    if a.dry_run:
        return dry_run()
    if not torch.cuda.is_available():
        print("bench_triton: needs a CUDA device (or --dry-run)", file=sys.stderr)
        return 2
    only = {x.strip() for x in a.only.split(",") if x.strip()}
    if only - set(SECTIONS):
        print(f"bench_triton: unknown sections {sorted(only - set(SECTIONS))}", file=sys.stderr)
        return 2
    from benchmarks import floors

    dev = torch.device("cuda")
    torch.manual_seed(0)
    figures: list[Figure] = []
    sweep: list[dict[str, Any]] = []

    def add(fig: Figure) -> None:
        figures.append(fig)
        unit = "ns" if fig.unit == "ns/token" else "us"
        print(floors.report(f"{fig.name} [{fig.how}]", fig.seconds, fig.floor, unit,
                            f"target <= {fig.target:.2f}x {fig.what}"), flush=True)

    def both(name: str, fns: list[Callable[[], None]], floor: float, target: float, what: str = "",
             benchmark: str = "triton", **extra: Any) -> tuple[float, float]:
        g_s, e_s = timed_pair(fns)
        add(Figure(name, g_s, floor, target, "graph", what, dict(extra), benchmark))
        add(Figure(name, e_s, floor, target, "eager", what, dict(extra), benchmark))
        return g_s, e_s

    copy_bw = floors.copy_bandwidth()
    serial = floors.serial_step_floor()
    empty = floors.empty_launch()
    print(f"floors: copy {copy_bw / 1e12:.2f} TB/s, serial mix3 step {serial * 1e9:.1f} ns, "
          f"empty launch {empty * 1e6:.2f} us", flush=True)
    floor_rows: dict[str, float] = {"copy_bandwidth_bytes_per_s": copy_bw, "serial_step_s": serial,
                                    "empty_launch_s": empty}

    # verify -----------------------------------------------------------------------------------------------
    num_slots = (2 << 30) // kc.CANARY_SLOT_BYTES
    sizes = [MI] if a.quick else [MI, 16 * MI]
    for n in sizes if "verify" in only else []:
        sets = 4 if n <= MI else 2
        indep = floors.gather_floor(n, sets=sets)
        floor_rows[f"gather_independent_{n}_s"] = indep
        print(f"floor: independent two-record gather of {n // MI} Mi entries {indep * 1e6:.2f} us "
              f"(floors.gather_floor; reference only)", flush=True)
        torch.cuda.empty_cache()
        for layout, build in (("chained", verify_setup), ("random", random_verify_setup)):
            for mode in kc.RealKvHashMode:
                extra_bytes = {kc.RealKvHashMode.NONE: 0, kc.RealKvHashMode.PARTIAL: 32,
                               kc.RealKvHashMode.ALL: KV_BYTES}[mode]
                target = 1 / 0.75 if mode == kc.RealKvHashMode.NONE else 1 / 0.7
                v = build(dev, num_slots=num_slots, n=n, sets=sets, mode=mode)
                gather = v.floor()
                floor_rows[f"gather_same_{layout}_{mode.name}_{n}_s"] = gather
                floor = gather * (RECORD_BYTES + extra_bytes) / RECORD_BYTES
                name = f"verify {n // MI} Mi entries, {layout}, real-KV {mode.name}"
                both(name, v.calls, floor, target,
                     f"(floor: same-index gather {gather * 1e6:.1f} us x {RECORD_BYTES + extra_bytes}/{RECORD_BYTES})",
                     "triton verify", entries=n, layout=layout, gather_same_s=gather)
                _clean(v.ctx, name)
                if a.sweep and n == MI:
                    for blk, warps, waves in [(256, 4, 8), (256, 8, 8), (512, 8, 4), (512, 8, 16), (1024, 8, 8),
                                              (512, 4, 8)]:
                        with tuning(verify_block=blk, verify_warps=warps, verify_waves=waves):
                            g_s, _ = timed_pair(v.calls)
                        sweep.append({"figure": name, "verify_block": blk, "verify_warps": warps,
                                      "verify_waves": waves, "seconds": g_s, "ratio": g_s / floor})
                        print(f"  sweep verify block={blk} warps={warps} waves={waves}: {g_s * 1e6:.1f} us "
                              f"({g_s / floor:.2f}x)", flush=True)
                del v
                torch.cuda.empty_cache()

    # writes -----------------------------------------------------------------------------------------------
    tokens = 32 * 1024
    for mode in (kc.RealKvHashMode.NONE, kc.RealKvHashMode.PARTIAL) if "write" in only else ():
        call, ctx = long_write_setup(dev, num_slots=1 << 22, tokens=tokens, mode=mode)
        name = f"write 1 x 32Ki tokens, real-KV {mode.name} (per token)"
        g_s, e_s = timed_pair([call], reps=10)
        for how, sec in (("graph", g_s), ("eager", e_s)):
            add(Figure(name, sec / tokens, serial, 1.5, how, "(floor: one serial mix3 step)", {"tokens": tokens},
                       "triton write (per token)", "ns/token"))
        _clean(ctx, name)
        if a.sweep and mode == kc.RealKvHashMode.NONE:
            for tile, warps in [(32, 1), (64, 2), (128, 4), (16, 1)]:
                with tuning(write_tile=tile, write_warps=warps):
                    g_s, _ = timed_pair([call], reps=5)
                sweep.append({"figure": name, "write_tile": tile, "write_warps": warps, "seconds": g_s / tokens,
                              "ratio": g_s / tokens / serial})
                print(f"  sweep write tile={tile} warps={warps}: {g_s / tokens * 1e9:.1f} ns/token", flush=True)
    if "write" in only:
        launcher, direct, ctx = decode_write_setup(dev, num_slots=1 << 22, reqs=1024)
        name = "write 1024 x 1 token (decode)"
        both(name, [launcher], empty, 2.0, "(floor: one eager empty launch; the eager figure is judged)",
             "triton write")
        _, e_direct = timed_pair([direct])
        add(Figure(name + ", op called directly", e_direct, empty, 2.0, "eager", "(no contract check, no registry)",
                   benchmark="triton write"))
        _clean(ctx, name)

    # plan -------------------------------------------------------------------------------------------------
    for pool in (False, True) if "plan" in only else ():
        call, vp, total = plan_setup(dev, bs=256, prefix=4096, num_slots=1 << 22, pool=pool)
        per_entry = 32 + 4 + (4 if pool else 0)
        floor = total * per_entry / copy_bw
        name = f"plan bs=256 x 4096 prefix{' + expected tokens' if pool else ''}"
        both(name, [call], floor, 1.3, f"(floor: {per_entry} B/entry at copy bandwidth)", "triton plan",
             entries=total)
        if a.sweep:
            for tile_, warps, row_waves in [(1024, 8, 8), (512, 4, 8), (1024, 4, 8), (2048, 8, 8), (2048, 16, 8),
                                            (512, 8, 8), (1024, 8, 2)]:
                with tuning(plan_tile=tile_, plan_warps=warps, plan_row_waves=row_waves):
                    g_s, _ = timed_pair([call])
                sweep.append({"figure": name, "plan_tile": tile_, "plan_warps": warps, "plan_row_waves": row_waves,
                              "seconds": g_s, "ratio": g_s / floor})
                print(f"  sweep plan tile={tile_} warps={warps} row_waves={row_waves}: {g_s * 1e6:.1f} us "
                      f"({g_s / floor:.2f}x)", flush=True)
        del vp
        torch.cuda.empty_cache()

    if a.out or a.raw:
        import triton

        day = date.today().isoformat()
        machine = (f"1x {torch.cuda.get_device_name()}, CUDA {torch.version.cuda}, torch {torch.__version__}, "
                   f"triton {triton.__version__}")
        if a.out:
            a.out.parent.mkdir(parents=True, exist_ok=True)
            a.out.write_text(json.dumps([f.record(machine, day) for f in figures], indent=2))
            print(f"wrote {a.out}")
        raw = a.raw or (a.out.parent / "raw" / f"{a.out.stem}.{day}.json" if a.out else None)
        if raw is not None:
            raw.parent.mkdir(parents=True, exist_ok=True)
            raw.write_text(json.dumps({
                "benchmark": "bench_triton", "date": day, "machine": machine,
                "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                "python": platform.python_version(), "tuning": dict(TUNING), "floors": floor_rows,
                "figures": [f.row() for f in figures], "sweep": sweep,
            }, indent=2))
            print(f"wrote {raw}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

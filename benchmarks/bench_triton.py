"""The triton backend on a GPU: each figure beside its hardware floor (measured in the same run) and the ratio.

Figures (targets of issue 4):

- verify of 1 Mi and 16 Mi entries over a 2 GiB canary buffer (64 Mi slots, clean chains: no violations), in
  two layouts: *chained* (the plan a real batch gives: 4096-token chains over random slots, so each entry's
  predecessor is the previous entry's slot, a cache hit) and *random* (independent random slots and
  predecessors: two cold records per entry). The floor is ``floors.gather_floor_for`` over the *same* slot
  and predecessor arrays (the records verify reads, 16 B of indices in, 8 B out: 88 B per entry when both
  records are cold), so a layout's cache behaviour helps figure and floor alike. Real-KV off: time <= floor /
  0.75. PARTIAL / ALL (one source of 128-byte strips): <= floor / 0.7, the floor scaled by the sectors each
  entry also reads (PARTIAL one 32-byte sector, ALL four): ``gather_floor_for * (88 + extra) / 88``. The old
  independent two-record ``gather_floor`` is recorded for reference.
- write of one 32 Ki-token request: <= 1.5x the serial mix3 step floor per token (``serial_step_floor``),
  real-KV off and PARTIAL.
- write of 1024 one-token requests (decode; seeds in range, chain-position assert on): <= 2x one eager empty
  launch (``empty_launch``).
- plan with bs = 256 and 4096-token prefixes (1 Mi entries): <= 1.3x the bytes floor, (entries x 32 B written +
  req_to_token read, 4 B per entry) at device copy bandwidth (``copy_bandwidth``).

Every figure is taken twice, through the public launchers (``backend="triton"``): replayed from a CUDA graph
(how an engine runs the canary; GPU time, the launchers' host work vanishes) and launched eagerly (host
overhead included when it exceeds the GPU time). The ratio judged against the target is the graph one for
verify and plan, the eager one for the decode write (its floor is an eager launch); both are recorded. Verify
rotates several index sets, like its floor, so that the plan arrays do not sit in L2 between repetitions.
Inputs come from ``tools.workloads``; ``--out`` gets the records (benchmarks/report.py), the
details (targets, floors, Triton's launch tuning, versions) go to ``raw/`` beside it.

Usage::

    python benchmarks/bench_triton.py --out results/bench_triton.json            # figures + floors
    python benchmarks/bench_triton.py --only plan,write                          # some sections only
    TRITON_INTERPRET=1 python benchmarks/bench_triton.py --dry-run               # CPU: set-ups only, tiny
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks import floors, timing
from benchmarks.report import Report, machine
from kvcanary.testing import builders
from kvcanary_backends.triton._jit import TUNING
from tools import workloads

if "triton" not in kc.registered_backends():  # a checkout that is not pip-installed has no entry-point metadata
    from kvcanary_backends.triton import BACKEND as _TRITON

    kc.register_backend(_TRITON)

MI = 1 << 20
KV_BYTES = 128  # strip of the benchmark's real-KV source (ALL reads all of it: four 32-byte sectors)
RECORD_BYTES = 88  # per verify entry in the gather floor: 2 x 32 B records + 16 B indices + 8 B out
SECTIONS = ("verify", "write", "plan")
Fn = Callable[[], None]


# -- set-ups (device-agnostic: --dry-run runs them tiny on the CPU) -------------------------------------------
def _sources(mode: kc.RealKvHashMode, num_slots: int, dev: torch.device) -> tuple[kc.RealKvSource, ...]:
    return () if mode == kc.RealKvHashMode.NONE else workloads.byte_sources(num_slots, KV_BYTES, 1, dev)


@dataclass
class VerifySetup:
    calls: list[Fn]
    ctx: kc.VerifyOrWriteContext
    plans: list[kc.VerifyPlan]

    def floor(self) -> float:
        """``floors.gather_floor_for`` over exactly the records these plans make verify read."""
        return floors.gather_floor_for(self.ctx.canary_buf, [p.verify_slot_indices for p in self.plans],
                                       [p.verify_prev_slot_indices for p in self.plans])


def _verify_calls(ctx: kc.VerifyOrWriteContext, plans: list[kc.VerifyPlan]) -> VerifySetup:
    return VerifySetup([partial(kc.launch_canary_verify_kernel, context=ctx, plan=p,
                                check_verify_expected_token=False, backend="triton") for p in plans], ctx, plans)


def verify_setup(dev: torch.device, *, num_slots: int, n: int, sets: int, mode: kc.RealKvHashMode,
                 length: int = 4096) -> VerifySetup:
    """The chained layout: ``sets`` plans of ``n`` entries, chains of ``length`` over random distinct slots."""
    ctx = builders.context(dev, num_slots=num_slots, sources=_sources(mode, num_slots, dev), mode=mode)
    perm = torch.randperm(num_slots - 1, device=dev) + 1
    plans = [workloads.stamp_chains(ctx, perm[k * n : (k + 1) * n], min(length, n), backend="triton")
             for k in range(sets)]
    ctx.kernel_run_counter.zero_()
    ctx.slot_run_counter.zero_()
    return _verify_calls(ctx, plans)


def random_verify_setup(dev: torch.device, *, num_slots: int, n: int, sets: int, mode: kc.RealKvHashMode
                        ) -> VerifySetup:
    """The random layout: ``sets`` plans of ``n`` random entries of ``scenarios.RandomPrevRecords``."""
    world = workloads.RandomPrevRecords(num_slots, dev)
    ctx = world.context(_sources(mode, num_slots, dev), mode)
    return _verify_calls(ctx, [world.plan(s, p) for s, p in world.index_sets(n, sets)])


def long_write_setup(dev: torch.device, *, num_slots: int, tokens: int, mode: kc.RealKvHashMode
                     ) -> tuple[Fn, kc.VerifyOrWriteContext]:
    ctx = builders.context(dev, num_slots=num_slots, sources=_sources(mode, num_slots, dev), mode=mode)
    slots = torch.randperm(num_slots - 1, device=dev)[:tokens] + 1
    return partial(kc.launch_canary_write_kernel, **workloads.chain_writes(ctx, [tokens], slots), backend="triton"), ctx


def decode_write_setup(dev: torch.device, *, num_slots: int, reqs: int) -> tuple[Fn, kc.VerifyOrWriteContext]:
    """``reqs`` one-token requests continuing chains whose heads sit in other slots (position 0 -> 1)."""
    ctx = builders.context(dev, num_slots=num_slots)
    perm = torch.randperm(num_slots - 1, device=dev) + 1
    kw = workloads.decode_writes(ctx, perm[:reqs], perm[reqs : 2 * reqs], backend="triton")
    return partial(kc.launch_canary_write_kernel, **kw, backend="triton"), ctx


def plan_setup(dev: torch.device, *, bs: int, prefix: int, num_slots: int, pool: bool
               ) -> tuple[Fn, kc.VerifyPlan, int]:
    batch = workloads.PlanBatch(bs, prefix, device=dev, pools=pool, num_slots=num_slots)
    call = partial(kc.launch_canary_plan_kernels, **batch.kwargs(0, pool=pool), backend="triton")
    return call, batch.vps[0], batch.entries


def _clean(ctx: kc.VerifyOrWriteContext, what: str) -> None:
    n = int(ctx.violation_write_index[0])
    if n:
        raise RuntimeError(f"bench_triton: {what} recorded {n} violations; the set-up should be clean")


# -- the run --------------------------------------------------------------------------------------------------
def dry_run() -> int:
    """Every set-up, tiny, one call each, on whatever device the backend runs (CPU: the interpreter)."""
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    for mode in kc.RealKvHashMode:
        for v in (verify_setup(dev, num_slots=4096, n=256, sets=2, mode=mode, length=64),
                  random_verify_setup(dev, num_slots=4096, n=256, sets=2, mode=mode)):
            for c in v.calls:
                c()
            _clean(v.ctx, f"verify {mode.name}")
            assert int(v.ctx.slot_run_counter[0]) == 512
        call, ctx = long_write_setup(dev, num_slots=4096, tokens=100, mode=mode)
        call()
        call()
        _clean(ctx, "long write")
    call, ctx = decode_write_setup(dev, num_slots=4096, reqs=16)
    call()
    _clean(ctx, "decode write")
    call, vp, total = plan_setup(dev, bs=4, prefix=50, num_slots=4096, pool=True)
    call()
    assert int(vp.verify_num_valid[0]) == total and int(vp.enable[0]) == 1
    print("bench_triton --dry-run: every set-up ran clean")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, help="write the records here (details go to raw/ beside it)")
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
    import triton

    dev = torch.device("cuda")
    torch.manual_seed(0)
    r = Report("triton", machine(dev, f"triton {triton.__version__}"))
    r.details.update({"python": platform.python_version(), "tuning": dict(TUNING)})

    def both(name: str, fns: list[Fn], floor: float, target: float, note: str, benchmark: str, *,
             per: int = 1, unit: str = "us", reps: int = 30) -> None:
        """The graph and the eager figure of ``fns`` (called in turn), each per ``per`` items."""
        r.add(f"{name} [graph]", timing.graph(fns, reps=reps) / per, floor, unit=unit, note=note, target=target,
              benchmark=benchmark)
        r.add(f"{name} [eager]", timing.events(fns, reps=reps) / per, floor, unit=unit, note=note, target=target,
              benchmark=benchmark)

    f = floors.common(r, dev)
    copy_bw, serial, empty = f.copy_bandwidth, f.serial_step, f.empty_launch

    # verify -----------------------------------------------------------------------------------------------
    num_slots = (2 << 30) // kc.CANARY_SLOT_BYTES
    for n in ([MI] if a.quick else [MI, 16 * MI]) if "verify" in only else []:
        sets = 4 if n <= MI else 2
        r.floor(f"independent two-record gather, {n // MI} Mi (s)", floors.gather_floor(n, sets=sets),
                "floors.gather_floor; reference only")
        torch.cuda.empty_cache()
        for layout, build in (("chained", verify_setup), ("random", random_verify_setup)):
            for mode in kc.RealKvHashMode:
                extra_bytes = {kc.RealKvHashMode.NONE: 0, kc.RealKvHashMode.PARTIAL: 32,
                               kc.RealKvHashMode.ALL: KV_BYTES}[mode]
                v = build(dev, num_slots=num_slots, n=n, sets=sets, mode=mode)
                gather = v.floor()
                r.floor(f"same-index gather, {layout}, {mode.name}, {n // MI} Mi (s)", gather,
                        "floors.gather_floor_for over the verify arrays")
                name = f"verify {n // MI} Mi entries, {layout}, real-KV {mode.name}"
                both(name, v.calls, gather * (RECORD_BYTES + extra_bytes) / RECORD_BYTES,
                     1 / 0.75 if mode == kc.RealKvHashMode.NONE else 1 / 0.7,
                     f"floor: same-index gather {gather * 1e6:.1f} us x {RECORD_BYTES + extra_bytes}/{RECORD_BYTES}",
                     "triton verify")
                _clean(v.ctx, name)
                del v
                torch.cuda.empty_cache()

    # writes -----------------------------------------------------------------------------------------------
    tokens = 32 * 1024
    for mode in (kc.RealKvHashMode.NONE, kc.RealKvHashMode.PARTIAL) if "write" in only else ():
        call, ctx = long_write_setup(dev, num_slots=1 << 22, tokens=tokens, mode=mode)
        name = f"write 1 x 32Ki tokens, real-KV {mode.name} (per token)"
        both(name, [call], serial, 1.5, "floor: one serial mix3 step", "triton write (per token)", per=tokens,
             unit="ns/token", reps=10)
        _clean(ctx, name)
    if "write" in only:
        call, ctx = decode_write_setup(dev, num_slots=1 << 22, reqs=1024)
        name = "write 1024 x 1 token (decode)"
        both(name, [call], empty, 2.0, "floor: one eager empty launch; the eager figure is judged", "triton write")
        _clean(ctx, name)

    # plan -------------------------------------------------------------------------------------------------
    for pool in (False, True) if "plan" in only else ():
        call, vp, total = plan_setup(dev, bs=256, prefix=4096, num_slots=1 << 22, pool=pool)
        per_entry = 32 + 4 + (4 if pool else 0)
        both(f"plan bs=256 x 4096 prefix{' + expected tokens' if pool else ''}", [call], total * per_entry / copy_bw,
             1.3, f"floor: {per_entry} B/entry at copy bandwidth", "triton plan")
        del vp
        torch.cuda.empty_cache()

    r.write(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

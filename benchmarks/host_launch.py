"""Host time to issue one eager launch on a CUDA device: the registry's default choice against forcing a backend.

The cases are the decode-step and verify shapes engines issue eagerly (1 Mi verify entries, random and chained
predecessors, with and without the token check; 1024 one-token writes). Each is timed three ways through the
public launcher, back to back with no synchronisation, the variants interleaved round after round and the
fastest round of each kept (``benchmarks/timing.py`` ``wall_interleaved``): the registry's default, and every
GPU backend forced by name. The floor beside the default is the same launch forced to the
backend the default picks, so the ratio is what automatic selection costs; the goal is at most 1 µs over it.
The floor beside each forced backend is a bare launch of an empty CUDA kernel (cuda.core, the cuda backend's
launch path, timed in the same run): the goal is at most 2x. Triton is timed twice: its compiled variants
launched through cuda.core (the default, ``[triton forced]``) and by Triton's own compiled launcher
(``[triton, Triton's launcher forced]``). Every call repeats the one before it exactly, so
after the first the launcher replays the launch its backend prepared (docs/extending/backend.md).
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks import timing
from benchmarks.bench_backends import DEV, Case, verify_case, write_case
from benchmarks.report import Report, machine
from kvcanary.registry import REGISTRY
from kvcanary.testing.parity import launcher
from tools import workloads

CALLS = 50  # launches per timed round: far fewer than the launch queue holds, so the host never waits on the GPU


TRITON_LAUNCHER = "triton, Triton's launcher"
"""The Triton backend with its compiled variants launched by Triton's own launcher (``Launcher.direct`` off);
plain ``triton`` launches them through cuda.core (the direct path)."""


def _triton_path(fn: timing.Fn, direct: bool) -> timing.Fn:
    """``fn`` with the Triton launcher's direct path set on or off for each call (read at each launch)."""
    from kvcanary_backends.triton._jit import Launcher

    def call() -> None:
        Launcher.direct = direct
        fn()

    return call


def host_s(case: Case, backends: list[str]) -> dict[str | None, float]:
    """Host seconds to issue one launch of ``case`` per forced backend and for the default (key ``None``);
    Triton twice (:data:`TRITON_LAUNCHER`)."""
    kw = case.make()
    fns: dict[str, timing.Fn] = {name: partial(launcher(case.op), **kw, backend=name) for name in backends}
    if "triton" in fns:
        fns[TRITON_LAUNCHER] = _triton_path(fns["triton"], False)
        fns["triton"] = _triton_path(fns["triton"], True)
    fns["default"] = partial(launcher(case.op), **kw)
    if "triton" in backends:  # the rounds interleave: each sets the path it times
        fns["default"] = _triton_path(fns["default"], True)
    try:
        best = timing.wall_interleaved(fns, calls=CALLS)
    finally:
        if "triton" in backends:
            from kvcanary_backends.triton._jit import Launcher

            Launcher.direct = True
    return {(None if k == "default" else k): v for k, v in best.items()}


def _direct_refusals() -> str:
    """Why Triton variants launched so far do not launch through cuda.core ("": every one does)."""
    from kvcanary_backends.triton import fold, plan, plan_entries, plan_offsets, scatter, verify, write

    mods = (fold, plan, plan_entries, plan_offsets, scatter, verify, write)
    return "; ".join(f"{m.__name__}: {sorted(set(r.values()))}" for m in mods if (r := m._LAUNCH.direct_refusals()))


def _bare_launch() -> float | None:
    """Host seconds of a bare launch of an empty kernel through the cuda backend's launch path (None: the cuda
    backend is not available here)."""
    cuda = REGISTRY.backends().get("cuda")
    if cuda is None or cuda.availability():
        return None
    from benchmarks.floors_cuda import empty_launch_cuda

    return empty_launch_cuda()["host"]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default=None, help="write the records here")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("host_launch: needs a CUDA device", file=sys.stderr)
        return
    r = Report("host_launch", machine(DEV))
    bare = _bare_launch()
    world = workloads.RandomPrevRecords(1 << 22, DEV)
    kv = workloads.byte_sources(world.num_slots, 128, 2, DEV)
    n = 1 << 20
    cases = [verify_case(n, world, kc.RealKvHashMode.NONE, False, 1.0, kv),
             verify_case(n, world, kc.RealKvHashMode.NONE, True, 1.0, kv),
             write_case(1024, 1, 1.0, 1.0)]
    token = verify_case(n, world, kc.RealKvHashMode.NONE, False, 1.0, kv)
    make = token.make
    token.make = lambda: {**make(), "check_verify_expected_token": True}
    token.name += ", token check"
    cases.insert(1, token)
    for case in cases:
        chosen = REGISTRY.select(case.op, DEV, call=None).backend.name
        names = [n for n in ("cuda", "triton")
                 if (b := REGISTRY.backends().get(n)) is not None and not b.static_reasons(case.op, DEV)]
        times = host_s(case, names)
        refused = _direct_refusals() if "triton" in names else ""
        for name in names + ([TRITON_LAUNCHER] if "triton" in names else []):
            how = {"triton": "; compiled variants launched through cuda.core" + (
                f" (refused: {refused})" if refused else ""), TRITON_LAUNCHER: "; direct path off"}.get(name, "")
            goal = None if bare is None or name == TRITON_LAUNCHER else 2.0  # that row: what the direct path replaced
            r.add(f"{case.name} [{name} forced]", times[name], bare, target=goal,
                  note=f"host time per eager launch; floor: a bare cuda.core launch of an empty kernel{how}")
        default = times[None]
        floor = times.get(chosen)
        r.add(f"{case.name} [registry default: {chosen}]", default, floor,
              note=f"floor: {chosen} forced; goal <= 1 us over it", target=None if floor is None else 1 + 1e-6 / floor)
    r.write(args.out)


if __name__ == "__main__":
    main()

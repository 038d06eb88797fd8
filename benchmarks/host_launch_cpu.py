"""Host time of the cuda backend's launch path on the CPU, the launch itself stubbed: replayed against dispatched.

No GPU is needed: every operation's small valid call (``kvcanary.testing.calls``, CPU tensors) goes through its
public launcher to a backend that runs the cuda backend's own packing (``backends.cuda.<op>.pack`` and its
grid) and hands the packed arguments to a stub in place of ``cuda.core.launch``. Three ways per operation,
interleaved round after round, the fastest round of each kept (``benchmarks/timing.py``):

- replayed: the backend declares ``prepare`` as the cuda backend does, so a repeated call replays the
  prepared launch (the contract's repeat-call check, the memo lookup, the stub);
- dispatched: the same backend without ``prepare``: every call builds the call object, selects the backend
  and packs (the launchers' path before the replay, and the path of a call whose addresses change);
- the floor: the stub alone, called with the packed arguments (what a bare launch adds on a GPU comes on top
  of every figure alike).

Usage: ``python benchmarks/host_launch_cpu.py [--out FILE]``.
"""

from __future__ import annotations

import argparse
import sys
import typing
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kvcanary as kc
from benchmarks import timing
from benchmarks.report import Report, machine
from kvcanary.registry import REGISTRY
from kvcanary.testing import calls
from kvcanary.testing.parity import launcher
from kvcanary_backends.cuda import plan, plan_entries, plan_offsets, scatter, verify, write

MODULES: dict[kc.Op, ModuleType] = {kc.Op.VERIFY: verify, kc.Op.WRITE: write, kc.Op.PLAN: plan,
                                     kc.Op.PLAN_OFFSETS: plan_offsets, kc.Op.PLAN_ENTRIES: plan_entries,
                                     kc.Op.SCATTER: scatter}
BY_CONTRACT = {typing.get_type_hints(m.pack)["call"]: m for m in MODULES.values()}
STREAM, CONFIG, KERNEL = object(), object(), object()


def stub_launch(stream: object, config: object, kernel: object, *args: int) -> None:
    """Stands for ``cuda.core.launch(stream, config, kernel, *args)``."""


def _packed(call: Any) -> tuple[int, ...] | None:
    """What the cuda backend packs for ``call``: its arguments, None where its grid is empty."""
    mod = BY_CONTRACT[type(call)]
    key, sizes, args = mod.pack(call)
    if mod.shape(key, sizes, 1) is None:
        return None
    mod.shape(key, sizes, 132)  # the grid, as the kernel's launch sizes it
    return tuple(args)


def kernel(call: Any) -> None:
    """The cuda backend's kernel path, the launch stubbed: pack, size the grid, launch."""
    args = _packed(call)
    if args is not None:
        stub_launch(STREAM, CONFIG, KERNEL, *args)


def prepare(call: Any) -> Callable[[], None]:
    """The cuda backend's prepared launch, the launch stubbed: packed once, a stream read per call."""
    args = _packed(call)
    if args is None:
        return lambda: None
    fn, streams = stub_launch, {0: STREAM}

    def run() -> None:
        fn(streams[0], CONFIG, KERNEL, *args)

    return run


def backend(name: str, prepared: bool) -> kc.Backend:
    return kc.Backend(name, "the cuda backend's packing, the launch stubbed (benchmark)", {
        op: kc.OpSupport(kernel, {"cpu": 0}, capture_safe=True, prepare=prepare if prepared else None)
        for op in MODULES})


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", default=None, help="write the records here")
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    for name, prepared in (("host_replayed", True), ("host_dispatched", False)):
        REGISTRY.register(backend(name, prepared), replace=True)
    r = Report("host_launch_cpu", machine("cpu"))
    for op in MODULES:
        kw = calls.of(op, "cpu")
        packed = _packed(op.contract.model_construct(**kw))
        fns: dict[str, timing.Fn] = {
            "replayed": partial(launcher(op), **kw, backend="host_replayed"),
            "dispatched": partial(launcher(op), **kw, backend="host_dispatched"),
            "stub": partial(stub_launch, STREAM, CONFIG, KERNEL, *(packed or ())),
        }
        best = timing.wall_interleaved(fns, calls=200, rounds=args.rounds)
        r.add(f"{op.value}: replayed", best["replayed"], best["stub"],
              note=f"dispatched / replayed {best['dispatched'] / best['replayed']:.2f}x; floor: the stubbed launch")
        r.add(f"{op.value}: dispatched", best["dispatched"], best["stub"], note="floor: the stubbed launch")
    r.write(args.out)


if __name__ == "__main__":
    main()

"""Python calls per step of each host phase of the transformers integration, without the op counter.

``host_ops.py``'s ``py_calls`` profiles each phase while its ``TorchDispatchMode`` counts the aten ops, and that
mode's own Python (the dispatch hook, mode push and pop, the op's overload lookup: about 35 calls per op) lands
in the same profile: a phase with 4 ops shows some 140 calls it does not make. This runs the same workload
(``host_ops``' model, prompts, config and its proxy of the manager's graphs) with only cProfile on, the kernels'
bodies and a replayed bucket's launches off the profile (device work on a GPU), and prints each phase's calls
per step: the median step (a decode step with nothing due: the usual one), the mean over every step, the
largest, and the median over the sweep's steps (``end_step`` only: those where a sweep ran). The probe's own
frames (its context manager: 4 calls each time a phase's entry point is called) are subtracted.

Usage (repository root)::

    python benchmarks/host_calls.py [--bs 32] [--new-tokens 24] [--page 16] [--steps]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import random
import statistics
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks import host_ops  # the workload and its probe points
from kvcanary.integrations.transformers.pool import PoolState
from kvcanary.integrations.transformers.session import TransformersCanary
from kvcanary.integrations.transformers.workload import tiny_llama
from kvcanary.manager import CanaryManager
from kvcanary.registry import REGISTRY

PROBE_CALLS = 4
"""The probe's frames inside a phase's profile: its generator's resumption, ``__exit__``, ``next`` and the
profiler's ``disable``."""


class _Calls:
    """One cProfile per (phase, step); a step starts at the integration's map."""

    def __init__(self) -> None:
        self.profs: dict[tuple[str, int], cProfile.Profile] = {}
        self.entries: dict[tuple[str, int], int] = {}
        self.sweeps: list[int] = []
        self.step = -1
        self.current: cProfile.Profile | None = None
        self._saved: list[tuple[Any, str, Any]] = []
        self._chosen: dict[Any, Any] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.current is not None:  # nested (prepare inside the head's window; the map's two parts)
            yield
            return
        prof = self.profs.setdefault((name, self.step), cProfile.Profile())
        self.entries[(name, self.step)] = self.entries.get((name, self.step), 0) + 1
        self.current = prof
        prof.enable()
        try:
            yield
        finally:
            prof.disable()
            self.current = None

    def off(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` off the profile (device work on a GPU)."""
        prof, self.current = self.current, None
        if prof is not None:
            prof.disable()
        try:
            fn()
        finally:
            self.current = prof
            if prof is not None:
                prof.enable()

    def wrap(self, owner: Any, attr: str, name: str, *, starts_step: bool = False) -> None:
        fn = getattr(owner, attr)
        calls = self

        def wrapped(*a: Any, **k: Any) -> Any:
            if starts_step and calls.current is None:
                calls.step += 1
            with calls.phase(name):
                return fn(*a, **k)

        self._saved.append((owner, attr, fn))
        setattr(owner, attr, wrapped)

    def install(self) -> None:
        self._chosen = dict(REGISTRY._cache)
        for key, (choices, declined) in self._chosen.items():  # every backend chosen by the warm-up
            REGISTRY._cache[key] = ([dataclasses.replace(c, impl=self._kernel(c.impl)) for c in choices], declined)
        first = "_requests" if hasattr(TransformersCanary, "_requests") else None
        if first is not None:
            self.wrap(TransformersCanary, first, "map", starts_step=True)
        self.wrap(PoolState, "batch", "map", starts_step=first is None)
        self.wrap(CanaryManager, "prepare", "head")
        self.wrap(CanaryManager, "head", "head")
        self.wrap(CanaryManager, "tail", "tail")
        self.wrap(CanaryManager, "end_step", "end_step")
        self.wrap(TransformersCanary, "_collect", "end_step")
        run_sweep = CanaryManager.run_sweep
        calls = self

        def counted_sweep(mgr: CanaryManager, *a: Any, **k: Any) -> int:
            calls.sweeps.append(calls.step)
            return run_sweep(mgr, *a, **k)

        self._saved.append((CanaryManager, "run_sweep", run_sweep))
        setattr(CanaryManager, "run_sweep", counted_sweep)  # noqa: B010  (a method swapped for the run)
        replay = host_ops._Replays.run

        def off_replay(graphs: Any, phase: str, bucket: Any, launches: Callable[[], None]) -> None:
            replay(graphs, phase, bucket, lambda: calls.off(launches))

        self._saved.append((host_ops._Replays, "run", replay))
        setattr(host_ops._Replays, "run", off_replay)  # noqa: B010

    def _kernel(self, impl: Any) -> Any:
        def body(call: Any) -> None:
            self.off(lambda: impl(call))

        return body

    def uninstall(self) -> None:
        REGISTRY._cache.update(self._chosen)
        for owner, attr, fn in reversed(self._saved):
            setattr(owner, attr, fn)
        self._saved.clear()

    def table(self) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = {}
        for (name, step), prof in self.profs.items():
            prof.create_stats()
            n = sum(int(v[1]) for v in prof.stats.values())
            out.setdefault(step, {})[name] = n - PROBE_CALLS * self.entries[(name, step)]
        return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    host_ops.workload_args(p)
    p.add_argument("--steps", action="store_true", help="also print every step's calls")
    args = p.parse_args()
    torch.set_num_threads(1)
    model = tiny_llama(seed=0, layers=1, hidden=32, heads=2, kv_heads=2, vocab=64)
    rng = random.Random(0)
    prompts = [[rng.randrange(1, 64) for _ in range(args.prompt_len)] for _ in range(args.bs)]
    host_ops._use_replays()  # the manager's graphs, proxied (a GPU's default)
    host_ops._run(model, prompts, args)  # warm-up
    calls = _Calls()
    calls.install()
    try:
        host_ops._run(model, prompts, args)
    finally:
        calls.uninstall()
    table = calls.table()
    steps = sorted(table)
    sweeps = set(calls.sweeps)
    print(f"host_calls bs={args.bs} ctx={args.prompt_len}+{args.new_tokens} page={args.page} steps={len(steps)} "
          f"sweeps={len(sweeps)} graphs=proxy (Python calls per step, without the op counter)")
    print(f"{'phase':10} {'median':>7} {'mean':>7} {'max':>6} {'sweep median':>13}")
    for ph in host_ops.PHASES:
        per = [table[s].get(ph, 0) for s in steps]
        sw = [table[s].get(ph, 0) for s in steps if s in sweeps]
        print(f"{ph:10} {statistics.median(per):7.1f} {statistics.mean(per):7.1f} {max(per):6d} "
              f"{statistics.median(sw) if sw else 0.0:13.1f}")
    if args.steps:
        print("step " + " ".join(f"{ph:>9}" for ph in host_ops.PHASES) + "  sweep")
        for s in steps:
            print(f"{s:4d} " + " ".join(f"{table[s].get(ph, 0):9d}" for ph in host_ops.PHASES)
                  + ("  yes" if s in sweeps else ""))


if __name__ == "__main__":
    main()

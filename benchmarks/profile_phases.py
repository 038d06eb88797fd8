"""Where each host phase of the transformers integration spends its time on a GPU host: a diagnosis, not a figure.

``bench_transformers`` times the wrapped step's phases (map, head, tail, end_step) with ``perf_counter``; this runs
the same workload (its GPU defaults) once more under two profilers and prints, per phase and per steady step:

- **torch.profiler** (CPU and CUDA activities): the aten ops and CUDA runtime calls (``cudaLaunchKernel``,
  ``cudaMemcpyAsync``, ``cudaEventRecord``, ``cudaStreamSynchronize`` ...) each phase issues, with their count and
  self time per step, found by the phase's ``record_function`` range around the calls;
- **cProfile**: the functions with the most own time inside each phase (built-ins such as a tensor's ``copy_``
  included), per step.

Both profilers slow the host down; the counts and the ranking are what this is for. ``--drain-rounds N`` also
times each phase without a profiler in alternating runs, as the engine's launch queue leaves it and after a
device sync (the canary's own host time, apart from waiting for queue space behind the engine's work).

Usage (repository root, a GPU machine)::

    python benchmarks/profile_phases.py [--bs 32] [--new-tokens 64] [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import functools
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from kvcanary.integrations.transformers import attach_canaries
from kvcanary.integrations.transformers.pool import PoolState
from kvcanary.integrations.transformers.session import TransformersCanary
from kvcanary.integrations.transformers.workload import cb_config, tiny_llama
from kvcanary.manager import CanaryManager

PHASES: tuple[tuple[Any, str, str], ...] = (
    (TransformersCanary, "_requests", "map"),
    (PoolState, "batch", "map"),
    (CanaryManager, "prepare", "head"),
    (CanaryManager, "head", "head"),
    (CanaryManager, "tail", "tail"),
    (CanaryManager, "end_step", "end_step"),
)


class Phases:
    """Wraps each phase's entry points; ``profiler`` is 'torch' (record_function ranges) or 'cprofile'.

    transformers runs its steps in a thread of its own, and both profilers see only the thread that starts them:
    the torch profiler is started in that thread, at the map of step ``first``, and stopped after the end_step of
    step ``first + count - 1`` (steady decode steps, past the prefill); cProfile is enabled around each phase."""

    def __init__(self, profiler: str, first: int, count: int) -> None:
        self.profiler = profiler
        self.first, self.count = first, count
        self.profiles: dict[str, cProfile.Profile] = collections.defaultdict(cProfile.Profile)
        self.torch_prof: Any = None
        self.steps = 0  # end_steps seen
        self.profiled = 0
        self.timed: dict[str, list[float]] = collections.defaultdict(list)  # 'timer'/'drain': seconds per step
        self._saved: list[tuple[Any, str, Any]] = []
        self._inside = False

    def _window(self) -> bool:
        return self.first <= self.steps < self.first + self.count

    @contextlib.contextmanager
    def _range(self, name: str) -> Iterator[None]:
        if self._inside:
            yield
            return
        self._inside = True
        try:
            if not self._window():
                yield
            elif self.profiler in ("timer", "drain"):
                if self.profiler == "drain" and torch.cuda.is_available():
                    # the device idle and its launch queue empty when the phase starts
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                try:
                    yield
                finally:
                    spent = time.perf_counter() - t0
                    cells = self.timed[name]
                    while len(cells) <= self.steps - self.first:
                        cells.append(0.0)
                    cells[self.steps - self.first] += spent
            elif self.profiler == "torch":
                if self.torch_prof is None:
                    activities = [torch.profiler.ProfilerActivity.CPU]
                    if torch.cuda.is_available():
                        activities.append(torch.profiler.ProfilerActivity.CUDA)
                    self.torch_prof = torch.profiler.profile(activities=activities)
                    self.torch_prof.__enter__()
                with torch.profiler.record_function(f"phase::{name}"):
                    yield
            else:
                prof = self.profiles[name]
                prof.enable()
                try:
                    yield
                finally:
                    prof.disable()
        finally:
            self._inside = False
        if name == "end_step":
            self.profiled += self._window()
            self.steps += 1
            if self.steps == self.first + self.count and self.torch_prof is not None:
                self.torch_prof.__exit__(None, None, None)

    def install(self) -> None:
        for cls, attr, name in PHASES:
            original = getattr(cls, attr)
            self._saved.append((cls, attr, original))

            def wrapped(*a: Any, _o: Callable[..., Any] = original, _n: str = name, **k: Any) -> Any:
                with self._range(_n):
                    return _o(*a, **k)

            setattr(cls, attr, functools.wraps(original)(wrapped))

    def remove(self) -> None:
        for cls, attr, original in reversed(self._saved):
            setattr(cls, attr, original)
        self._saved.clear()


def run(model: Any, prompts: list[list[int]], args: argparse.Namespace) -> TransformersCanary:
    import transformers

    gen_cls: Any = transformers.GenerationConfig
    gc = gen_cls(max_new_tokens=args.new_tokens, do_sample=False, eos_token_id=-1,
             pad_token_id=0)
    pages = (args.prompt_len + args.new_tokens + args.page - 1) // args.page
    cb = cb_config(page=args.page, num_blocks=args.bs * pages + 8, max_batch_tokens=args.batch_tokens,
                   max_requests=args.bs)
    session = attach_canaries(model, real_kv="partial", backend=args.backend)
    with session:
        model.generate_batch(prompts, generation_config=gc, continuous_batching_config=cb, progress_bar=False)
    if args.device == "cuda":
        torch.cuda.synchronize()
    return session


def profiled_run(kind: str, model: Any, prompts: list[list[int]], args: argparse.Namespace) -> Phases:
    """One run with the phases' entry points wrapped for ``kind`` (see :class:`Phases`), unwrapped after."""
    phases = Phases(kind, args.first, args.count)
    phases.install()
    try:
        run(model, prompts, args)
    finally:
        phases.remove()
    return phases


def torch_table(prof: Any, steps: int, top: int) -> None:
    """Self CPU time and count per (phase, event name), per step, from the phase ranges' descendants."""
    agg: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    totals: dict[str, float] = collections.defaultdict(float)
    for ev in prof.events():
        if ev.name.startswith("phase::"):
            totals[ev.name[7:]] += ev.cpu_time_total
            continue
        parent = ev.cpu_parent
        while parent is not None and not parent.name.startswith("phase::"):
            parent = parent.cpu_parent
        if parent is None:
            continue
        cell = agg[(parent.name[7:], ev.name)]
        cell[0] += 1
        cell[1] += ev.self_cpu_time_total
    for phase in ("map", "head", "tail", "end_step"):
        rows = sorted(((n, c, t) for (p, n), (c, t) in agg.items() if p == phase), key=lambda r: -r[2])
        print(f"\n== torch.profiler: {phase}: {totals[phase] / steps:.1f} us per step (profiled) ==")
        for n, c, t in rows[:top]:
            print(f"  {n[:60]:60s} {c / steps:7.2f} per step  {t / steps:8.2f} us self")


def cprofile_table(phases: Phases, steps: int, top: int) -> None:
    for phase in ("map", "head", "tail", "end_step"):
        prof = phases.profiles.get(phase)
        if prof is None:
            continue
        st = pstats.Stats(prof)
        print(f"\n== cProfile: {phase}: {st.total_tt / steps * 1e6:.1f} us per step (profiled), "  # type: ignore[attr-defined]
              f"{st.total_calls / steps:.0f} calls per step ==")  # type: ignore[attr-defined]
        entries = sorted(st.stats.items(), key=lambda kv: -kv[1][2])  # type: ignore[attr-defined]
        for (file, line, fn), (_cc, nc, tt, ct, _callers) in entries[:top]:
            where = f"{Path(file).name}:{line}" if file != "~" else ""
            print(f"  {fn[:48]:48s} {where[:34]:34s} {nc / steps:7.2f} calls  {tt / steps * 1e6:8.2f} us own  "
                  f"{ct / steps * 1e6:8.2f} us cum")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="cpu: a smoke run of this script, not a diagnosis")
    p.add_argument("--backend", default=None)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--bs", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=1536)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--page", type=int, default=256)
    p.add_argument("--batch-tokens", type=int, default=4096)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--first", type=int, default=24, help="the first profiled step (past the prefill)")
    p.add_argument("--count", type=int, default=24, help="steps profiled")
    p.add_argument("--profilers", default="torch,cprofile", help="comma-separated: torch, cprofile (or none)")
    p.add_argument("--drain-rounds", type=int, default=0,
                   help="also time each phase without a profiler, as the engine's queue leaves it and after a "
                        "device sync (the canary's own host time), alternating runs")
    args = p.parse_args()
    model = tiny_llama(seed=0, layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.heads,
                       vocab=32000, dtype=torch.bfloat16 if args.device == "cuda" else torch.float32,
                       device=args.device)
    rng = random.Random(0)
    prompts = [[rng.randrange(1, 32000) for _ in range(args.prompt_len)] for _ in range(args.bs)]
    run(model, prompts, args)  # warm-up
    plain = run(model, prompts, args)
    steps = max(1, plain.steps)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"{name} torch {torch.__version__}; unprofiled run, per step over {steps} steps:")
    print("  " + ", ".join(f"{k} {v / steps * 1e6:.1f} us" for k, v in plain.host_seconds.items()))
    if args.drain_rounds:
        timed: dict[str, dict[str, list[float]]] = {"timer": collections.defaultdict(list),
                                                    "drain": collections.defaultdict(list)}
        for _ in range(args.drain_rounds):
            for kind in ("timer", "drain"):
                phases = profiled_run(kind, model, prompts, args)
                for name, cells in phases.timed.items():
                    timed[kind][name] += cells
        print("\nmedian host time per steady step (us), as the session's queue leaves it / after a device sync:")
        for name in ("map", "head", "tail", "end_step"):
            a, b = (statistics.median(timed[k][name]) * 1e6 if timed[k][name] else float("nan")
                    for k in ("timer", "drain"))
            print(f"  {name:9s} {a:8.1f}  {b:8.1f}")
        total = [sum(statistics.median(timed[k][n]) for n in ("map", "head", "tail", "end_step")) * 1e6
                 for k in ("timer", "drain")]
        print(f"  {'total':9s} {total[0]:8.1f}  {total[1]:8.1f}")
    for kind in args.profilers.split(","):
        if kind in ("", "none"):
            continue
        phases = profiled_run(kind, model, prompts, args)
        if kind == "torch":
            if phases.torch_prof is None:
                raise SystemExit("the torch profiler never started: fewer steps than --first")
            torch_table(phases.torch_prof, max(1, phases.profiled), args.top)
        else:
            cprofile_table(phases, max(1, phases.profiled), args.top)


if __name__ == "__main__":
    main()

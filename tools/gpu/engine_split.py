"""Where the demo engine's decode step time goes: the engine without the canary timed alone and beside canary
engines in the same process, and the CUDA runtime calls of one of its steps.

bench_engine's ``engine_step without canary`` row is +37 % on a GPU after round 4 (H100 and H200), while the
engine's dispatched torch ops per decode step are the same before and after and its host time per step on a CPU
is the same. So this splits the step on a GPU three ways, run in each tree (the tree's ``kvcanary`` comes from
``PYTHONPATH``; this file imports nothing else of either tree, so one copy serves both):

- ``alone``: one engine without the canary, its decode steps back to back;
- ``beside 1`` / ``beside 2``: the same engine's steps interleaved with one / two canary engines' steps (the
  before and the after benchmark's arrangement; the second canary engine feeds its journal where the tree has one);
- each arrangement also with ``torch.set_num_threads(1)`` (``1 thread``), since bench_engine sets it on a CPU only.

Every engine is bench_engine's prefilled engine (``bs`` requests of ``ctx`` random tokens, graph bucket ``bs``)
with enough tokens left that no request finishes inside the timed steps. Per arrangement it prints the median
step (wall clock, the device synchronised at both ends) and its ratio to ``alone``; then, for the last step of
``alone`` and of ``beside 2``, the profiler's CUDA runtime calls (count and host microseconds each).

Usage (from the tree to measure; a dev diagnostic, never installed)::

    PYTHONPATH=<tree> python3 tools/gpu/engine_split.py [--bs 64] [--ctx 1024] [--steps 20]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def prefilled(canary: Any, *, device: str, bs: int, ctx: int, left: int, journal: bool) -> Any:
    """An engine whose ``bs`` requests (seed 1) are prefilled and each have ``left`` decode steps at least."""
    from kvcanary.demo.engine import Engine, EngineConfig

    per_chunk = max(1, min(bs, 8))
    new_tokens = left + -(-bs // per_chunk)
    cfg = EngineConfig(num_slots=bs * (ctx + new_tokens + 4) + 1, req_rows=bs + 1, max_running=bs,
                       max_context_len=ctx + new_tokens + 4, chunk_size=ctx * per_chunk, device=device,
                       graph_buckets=(bs,))
    kwargs: dict[str, Any] = {"canary": canary}
    if journal and "journal" in inspect.signature(Engine).parameters:
        kwargs["journal"] = True
    eng = Engine(cfg, **kwargs)
    eng.warmup()
    g = torch.Generator().manual_seed(1)
    for _ in range(bs):
        eng.submit(torch.randint(0, cfg.model.vocab_size, (ctx,), generator=g).tolist(), new_tokens)
    while any(r.state.value in ("waiting", "prefill") for r in eng.requests.values()):
        eng.step()
    return eng


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        torch.cuda.synchronize()


def timed(step: Callable[[], object]) -> float:
    """Seconds of one call, the device synchronised before and after."""
    _sync()
    t0 = time.perf_counter()
    step()
    _sync()
    return time.perf_counter() - t0


def runtime_calls(step: Callable[[], object]) -> str:
    """The aten ops of one ``step`` under the profiler, and its CUDA runtime and driver calls (count and host
    microseconds each, the 10 costliest)."""
    from torch.profiler import ProfilerActivity, profile

    _sync()
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]) as prof:
        step()
        _sync()
    events = prof.key_averages()
    aten = sum(e.count for e in events if e.key.startswith("aten::"))
    rows = sorted((e for e in events if e.key.startswith(("cuda", "cu"))), key=lambda e: -e.self_cpu_time_total)
    return f"{aten} aten ops; " + "; ".join(f"{e.key} x{e.count} {e.self_cpu_time_total:.0f} us" for e in rows[:10])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of this script only")
    p.add_argument("--bs", type=int, default=64)
    p.add_argument("--ctx", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args(argv)
    import kvcanary
    from kvcanary.consts import RealKvHashMode
    from kvcanary.manager import CanaryConfig

    dev = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    print(f"engine_split: kvcanary from {kvcanary.__file__}; {dev}, torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads; bs={args.bs} ctx={args.ctx} steps={args.steps}")
    canary = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, health_warmup_steps=10**6)
    left = 4 * args.steps + 8  # the arrangements, each warmed by one step, plus the profiled steps
    threads = torch.get_num_threads()
    results: dict[str, float] = {}
    for one_thread in (False, True):
        torch.set_num_threads(1 if one_thread else threads)
        off = prefilled(None, device=args.device, bs=args.bs, ctx=args.ctx, left=left, journal=False)
        others: list[Any] = []
        arrangements = [("alone", None), ("beside 1", (canary, False)), ("beside 2", (canary, True))]
        if not one_thread:
            arrangements.append(("beside 2, gc off", None))
        for name, extra in arrangements:
            if extra is not None:
                others.append(prefilled(extra[0], device=args.device, bs=args.bs, ctx=args.ctx, left=left,
                                        journal=extra[1]))
            for eng in (off, *others):  # one untimed step each
                timed(eng.step)
            times = []
            if name.endswith("gc off"):
                gc.disable()
            for _ in range(args.steps):
                times.append(timed(off.step))
                for eng in others:
                    timed(eng.step)
            gc.enable()
            label = f"{name}{', 1 thread' if one_thread else ''}"
            results[label] = statistics.median(times)
            base = results["alone, 1 thread" if one_thread else "alone"]
            print(f"  {label:<20} engine without canary: median step {results[label] * 1e3:8.2f} ms, "
                  f"{results[label] / base:.3f}x alone  (min {min(times) * 1e3:.2f}, max {max(times) * 1e3:.2f})")
            if not one_thread and name in ("alone", "beside 2"):
                print(f"    runtime calls of one step ({name}): {runtime_calls(off.step)}")
        del off, others
        gc.collect()
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    torch.set_num_threads(threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

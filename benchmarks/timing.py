"""The one timing helper of every benchmark: median of N repetitions, in seconds per call.

- :func:`wall`: wall clock (``time.perf_counter``) around ``calls`` back-to-back calls. On the CPU it times the
  work; with CUDA work queued it times the host side only (the device is synchronised outside the timed
  region), unless ``include_gpu`` also waits for the device inside it.
- :func:`events`: CUDA events around ``fns`` called in turn, back to back: GPU time whenever the GPU is the
  bottleneck, host time when launches are shorter than their host cost (eager figures).
- :func:`graph`: ``fns`` captured in turn, several rounds, in one CUDA graph and replayed: GPU time even for
  kernels shorter than a launch; no host work is timed (the contract checks and the dispatch of a public
  launcher vanish here, which is how a benchmark times a kernel without them).
- :func:`device_time`: :func:`events` on a CUDA device, :func:`wall` elsewhere.
- :func:`wall_interleaved`: :func:`wall` over several variants taken in turn, round after round, fastest
  round of each: host-time comparisons between variants that a noisy host would otherwise swamp
  (:func:`interleaved_rounds`: every round's figure, for the run-to-run noise).

Several argument sets called in turn (``fns``) keep inputs from sitting in L2 between repetitions.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

import torch

Fn = Callable[[], object]

GRAPH_REPLAY_S = 2e-3
"""How long :func:`graph` aims one replay to take when it picks the number of rounds itself."""


def _fns(fns: Fn | Sequence[Fn]) -> list[Fn]:
    return [fns] if callable(fns) else list(fns)


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        torch.cuda.synchronize()


def wall(fn: Fn, *, calls: int = 1, reps: int = 5, warmup: int = 1, include_gpu: bool = False) -> float:
    """Median over ``reps`` of the wall-clock seconds per call of ``calls`` back-to-back calls of ``fn``.

    ``include_gpu`` synchronises the CUDA device before the clock stops (the work done, not only issued);
    otherwise queued GPU work is waited for after each repetition, outside the timed region.
    """
    for _ in range(warmup):
        fn()
    _sync()
    out: list[float] = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if include_gpu:
            _sync()
        out.append((time.perf_counter() - t0) / calls)
        _sync()
    return float(statistics.median(out))


def interleaved_rounds(fns: dict[str, Fn], *, calls: int = 50, rounds: int = 40,
                       warmup: int = 20, rotate: bool = False) -> dict[str, list[float]]:
    """Seconds per call of each of ``fns``, every round: ``calls`` back-to-back calls of one variant, then the
    next, for ``rounds`` rounds (what :func:`wall_interleaved` takes the fastest of; the spread between rounds,
    or between two identical variants, is the run-to-run noise). ``rotate``: round ``r`` starts with variant
    ``r mod len(fns)``, so that no variant always runs first or after the same one."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    _sync()
    out: dict[str, list[float]] = {name: [] for name in fns}
    items = list(fns.items())
    for r in range(rounds):
        k = r % len(items) if rotate and items else 0
        for name, fn in items[k:] + items[:k]:
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out[name].append((time.perf_counter() - t0) / calls)
            _sync()
    return out


def wall_interleaved(fns: dict[str, Fn], *, calls: int = 50, rounds: int = 40, warmup: int = 20) -> dict[str, float]:
    """Seconds per call of each of ``fns``: ``calls`` back-to-back calls of one variant, then the next, for
    ``rounds`` rounds; the fastest round of each variant (host noise only ever adds time)."""
    per_round = interleaved_rounds(fns, calls=calls, rounds=rounds, warmup=warmup)
    return {name: min(ts) if ts else math.inf for name, ts in per_round.items()}


def _event() -> torch.cuda.Event:
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def _between_events(fn: Fn) -> float:
    start, end = _event(), _event()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 1e3


def events(fns: Fn | Sequence[Fn], *, reps: int = 20, warmup: int = 3) -> float:
    """Median seconds per call of ``fns`` called in turn, back to back, between two CUDA events."""
    fs = _fns(fns)

    def each() -> None:
        for f in fs:
            f()

    for _ in range(warmup):
        each()
    torch.cuda.synchronize()
    return float(statistics.median(_between_events(each) for _ in range(reps))) / len(fs)


def graph(fns: Fn | Sequence[Fn], *, rounds: int | None = None, reps: int = 20) -> float:
    """Median GPU seconds per call of ``fns`` (called in turn) captured ``rounds`` times in one CUDA graph.

    The functions run once eagerly on a side stream first (compiling and loading their kernels outside the
    capture, as torch's graph documentation asks). ``rounds=None`` picks enough rounds for a replay of about
    :data:`GRAPH_REPLAY_S` (at most 200), from one eager round timed with events.
    """
    fs = _fns(fns)

    def each() -> None:
        for f in fs:
            f()

    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        each()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    if rounds is None:
        rounds = max(1, min(200, math.ceil(GRAPH_REPLAY_S / max(_between_events(each), 1e-7))))
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(rounds):
            each()
    g.replay()
    torch.cuda.synchronize()
    return float(statistics.median(_between_events(g.replay) for _ in range(reps))) / (rounds * len(fs))


def device_time(fn: Fn, device: torch.device, *, reps: int = 20, warmup: int = 3) -> float:
    """Median seconds per call: CUDA events on a CUDA device, the wall clock elsewhere."""
    if device.type == "cuda":
        return events(fn, reps=reps, warmup=warmup)
    return wall(fn, reps=reps, warmup=warmup)

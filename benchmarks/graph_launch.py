"""What one CUDA graph launch costs the host, and where: a diagnosis of the manager's replays, not a figure.

``bench_manager_graphs`` (the manager alone, main thread, device drained) measures a replayed TAIL at about 6 µs of
host time on an H100, while ``bench_transformers`` measures the same phase at 45-55 µs inside transformers'
continuous batching, also with the device drained. This times one small graph shaped like a TAIL (four one-element
kernels, then a copy into pinned host memory) and one eager launch of a one-element kernel, each call alone
(``perf_counter_ns`` around it, the device synchronized before it, off the clock), in settings that separate the
candidate causes:

- ``main``: the main thread, the device idle;
- ``busy``: the device still running a 50 µs kernel queued just before (the launch queue not full);
- ``thread``: a worker thread (transformers runs its generation loop in one);
- ``streams``: the graph launched into two streams in turn (a graph captured on one stream and replayed on
  another, as the manager does);
- ``polluted``: 400 eager launches of 8 distinct kernels before each call, then a sync (what a forward leaves
  behind in the host's caches);
- ``in step``: inside a real ``generate_batch`` run (transformers' generation thread), right after each forward.

Each graph figure is given for ``torch.cuda.CUDAGraph.replay`` and for the driver's ``cuGraphLaunch`` on the
same executable graph (``raw_cuda_graph_exec``, through ctypes): the difference is torch's own wrapper.

Usage (repository root, a GPU machine)::

    python benchmarks/graph_launch.py [--reps 400] [--no-transformers] [--out FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks.report import Report, machine

BENCH = "graph_launch"
Probe = Callable[[], None]


def driver_launch() -> Callable[[int, int], int] | None:
    """``cuGraphLaunch(exec, stream)`` from libcuda through ctypes (it releases the GIL as torch does), or None."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    fn = lib.cuGraphLaunch
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


def tail_like(dev: torch.device, *, fork: bool = False) -> tuple[torch.cuda.CUDAGraph, Probe]:
    """A graph of four one-element kernels and a 64 KiB copy into pinned memory, captured on a side stream as the
    manager captures (its replays go to the current stream), and the same work run eagerly. ``fork``: the last
    two kernels on a second stream beside the first two, joined before the copy (V's fork)."""
    buf = torch.zeros(4, device=dev)
    state = torch.zeros(16384, device=dev)
    host = torch.empty(16384, pin_memory=True)
    branch = torch.cuda.Stream(dev)  # type: ignore[no-untyped-call]

    def work() -> None:
        if fork:
            branch.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(branch):
                for i in (2, 3):
                    buf[i : i + 1].add_(1)
        for i in (0, 1) if fork else range(4):
            buf[i : i + 1].add_(1)
        if fork:
            torch.cuda.current_stream(dev).wait_stream(branch)
        host.copy_(state, non_blocking=True)

    work()
    torch.cuda.synchronize(dev)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream(dev)  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        graph.capture_begin(capture_error_mode="thread_local")
        work()
        graph.capture_end()
    torch.cuda.current_stream(dev).wait_stream(side)
    torch.cuda.synchronize(dev)
    return graph, work


def probes(graph: torch.cuda.CUDAGraph, forked: torch.cuda.CUDAGraph, dev: torch.device) -> dict[str, Probe]:
    """The calls timed: the graph through torch and through the driver, the forked graph through torch, and one
    eager one-element kernel."""
    one = torch.zeros(1, device=dev)

    def eager() -> None:
        one.add_(1)
    out: dict[str, Probe] = {"torch replay": graph.replay, "torch replay, forked graph": forked.replay,
                             "eager add_": eager}
    launch = driver_launch()
    raw = getattr(graph, "raw_cuda_graph_exec", None)
    if launch is not None and raw is not None:
        handle = int(raw())
        get_stream = torch._C._cuda_getCurrentRawStream
        index = dev.index or 0

        def driver() -> None:
            rc = launch(handle, get_stream(index))
            if rc:
                raise RuntimeError(f"cuGraphLaunch returned {rc}")
        out["cuGraphLaunch"] = driver
    return out


def time_calls(fn: Probe, dev: torch.device, reps: int, before: Probe | None = None,
               streams: tuple[torch.cuda.Stream, ...] = ()) -> float:
    """Median host ns of ``fn`` called alone, the device synchronized before each call (``before`` runs first,
    off the clock, and is not synchronized when it is the busy kernel); with ``streams``, each call on the next
    of them in turn (made current off the clock)."""
    got: list[int] = []
    for i in range(reps):
        torch.cuda.synchronize(dev)
        if streams:
            torch.cuda.set_stream(streams[i % len(streams)])
        if before is not None:
            before()
        t0 = time.perf_counter_ns()
        fn()
        got.append(time.perf_counter_ns() - t0)
    torch.cuda.synchronize(dev)
    if streams:
        torch.cuda.set_stream(torch.cuda.default_stream(dev))
    return float(statistics.median(got))


def busy(dev: torch.device) -> Probe:
    """A 50 µs spin kernel queued just before the timed call."""
    khz = getattr(torch.cuda.get_device_properties(dev), "clock_rate", 1_980_000)  # an H100's boost clock
    cycles = int(50e-6 * khz * 1e3)
    return lambda: torch.cuda._sleep(cycles)  # type: ignore[no-untyped-call]


def polluter(dev: torch.device) -> Probe:
    """400 eager launches of 8 distinct small kernels, then a sync: a forward's footprint on the host."""
    x = torch.randn(64, 64, device=dev)
    ops: list[Callable[[torch.Tensor], Any]] = [torch.relu, torch.sigmoid, torch.tanh, torch.exp, torch.neg,
                                                torch.abs, torch.sqrt, lambda t: t @ t]

    def run() -> None:
        for i in range(400):
            ops[i % len(ops)](x)
        torch.cuda.synchronize(dev)
    return run


def in_thread(fn: Callable[[], float]) -> float:
    """``fn`` run on a worker thread (its result)."""
    box: list[float] = []
    th = threading.Thread(target=lambda: box.append(fn()))
    th.start()
    th.join()
    return box[0]


def other_threads() -> list[str]:
    """Every other Python thread of the process and where it is (its three innermost frames)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out: list[str] = []
    for ident, frame in sys._current_frames().items():
        if ident == threading.get_ident():
            continue
        where: list[str] = []
        f: Any = frame
        while f is not None and len(where) < 3:
            where.append(f"{f.f_code.co_name} ({Path(f.f_code.co_filename).name}:{f.f_lineno})")
            f = f.f_back
        out.append(f"{names.get(ident, ident)}: {' < '.join(where)}")
    return out


def in_generate_batch(calls: dict[str, Probe], dev: torch.device,
                      steps_wanted: int) -> tuple[dict[str, float], list[str]]:
    """Each call timed once per step right after transformers' forward, in its generation thread (device drained
    first); medians over the run's steps, and what the process's other threads were doing at the fifth step."""
    import transformers

    from kvcanary.integrations.transformers.workload import cb_config, tiny_llama

    model = tiny_llama(seed=0, layers=2, hidden=1024, heads=8, kv_heads=8, vocab=32000, dtype=torch.bfloat16,
                       device=str(dev))
    got: dict[str, list[int]] = {name: [] for name in calls}
    forward = model.forward

    threads: list[str] = []

    def timed_forward(*args: Any, **kwargs: Any) -> Any:
        out = forward(*args, **kwargs)
        if len(got[next(iter(calls))]) == 4:
            threads.extend(other_threads())
        for name, fn in calls.items():
            torch.cuda.synchronize(dev)
            t0 = time.perf_counter_ns()
            fn()
            got[name].append(time.perf_counter_ns() - t0)
        torch.cuda.synchronize(dev)
        return out

    model.forward = timed_forward
    rng = random.Random(0)
    bs, prompt = 16, 256
    prompts = [[rng.randrange(1, 32000) for _ in range(prompt)] for _ in range(bs)]
    gen_cls: Any = transformers.GenerationConfig
    gc = gen_cls(max_new_tokens=steps_wanted, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = cb_config(page=256, num_blocks=bs * 2 + 8, max_batch_tokens=4096, max_requests=bs)
    model.generate_batch(prompts, generation_config=gc, continuous_batching_config=cb, progress_bar=False)
    return {name: float(statistics.median(v[2:])) for name, v in got.items() if len(v) > 2}, threads


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--reps", type=int, default=400)
    p.add_argument("--no-transformers", action="store_true", help="skip the generate_batch setting")
    p.add_argument("--out", type=Path)
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("graph_launch: needs a CUDA device", file=sys.stderr)
        return 2
    dev = torch.device("cuda", torch.cuda.current_device())
    r = Report(BENCH, machine(dev))
    graph, _ = tail_like(dev)
    forked, _ = tail_like(dev, fork=True)
    calls = probes(graph, forked, dev)
    reps = a.reps
    floor = time_calls(calls["eager add_"], dev, reps)
    r.floor("one eager one-element kernel, main thread, idle device (ns)", floor, "time_calls")
    two = (torch.cuda.default_stream(dev), torch.cuda.Stream(dev))  # type: ignore[no-untyped-call]
    settings: dict[str, Callable[[Probe], float]] = {
        "main": lambda fn: time_calls(fn, dev, reps),
        "busy": lambda fn: time_calls(fn, dev, reps, busy(dev)),
        "thread": lambda fn: in_thread(lambda: time_calls(fn, dev, reps)),
        "streams": lambda fn: time_calls(fn, dev, reps, streams=two),
        "polluted": lambda fn: time_calls(fn, dev, max(reps // 8, 20), polluter(dev)),
    }
    for setting, timer in settings.items():
        for name, fn in calls.items():
            r.value(f"{name}, {setting}", timer(fn) / 1e3, floor / 1e3, unit="us",
                    note="floor: one eager one-element kernel, main thread, idle device")
    if not a.no_transformers:
        medians, threads = in_generate_batch(calls, dev, 24)
        for line in threads:
            r.note(f"other thread during the step: {line}")
        for name, ns in medians.items():
            r.value(f"{name}, in step (transformers' generation thread)", ns / 1e3, floor / 1e3, unit="us",
                    note="floor: one eager one-element kernel, main thread, idle device")
    r.write(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

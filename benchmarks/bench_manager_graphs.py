"""Host time of the manager's HEAD and TAIL per forward, eager (``CanaryConfig(graphs=False)``) against replayed
from the manager's own CUDA graphs (``graphs=True``), same pool and batches.

The pool is shaped like bench_transformers' GPU case (layer-0 K and V of 8 KV heads of 128 in bf16, bs 32 requests
of 1536 + 128 tokens, real-KV PARTIAL, K and V): the requests are prefilled, then each decode forward is timed
on the host as an eagerly running engine calls it, ``prepare`` + ``head`` (the "head" phase) and ``tail``, with
the device drained between forwards (outside the clock) so a full launch queue never blocks the host.

Floors: one ``CUDAGraph.replay`` of a one-kernel graph for head and for tail (the decode batch is the same object
at every forward: from its second reuse its staging copy runs inside the staged HEAD graph). Beside the times,
the torch operators each phase dispatches on the host per forward (counted with a ``TorchDispatchMode``; a
graph replay dispatches none): the floor of a replayed head and of a replayed tail is none.

``--device cpu`` (shrunk) has no CUDA graphs: it runs the eager rows and a proxy of the replayed path, the
bucketed forward whose replays are stubbed out (a bucket's first use runs its padded launches eagerly, later
uses launch nothing), which is the host work a GPU pays around its replays, less the replay itself.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.bench_engine import chunked_prefill, token_batch
from benchmarks.report import Report, machine
from kvcanary.consts import PoolKind, RealKvHashMode
from kvcanary.manager import CanaryBatch, CanaryCapacities, CanaryConfig, CanaryManager, KvPoolSpec, PoolGroupSpec
from kvcanary.manager.graphs import Bucket, ForwardGraphs

BENCH = "bench_manager_graphs"


class StubbedReplays(ForwardGraphs):
    """The CPU proxy of the manager's graphs: a bucket's first use runs its padded launches eagerly, every later
    use of the bucket launches nothing (where a GPU replays the captured graph)."""

    def __init__(self, *, rows_capacity: int, tokens_capacity: int) -> None:
        super().__init__(rows_capacity=rows_capacity, tokens_capacity=tokens_capacity, capture=False, strict=True)
        self._seen: set[tuple[str, Bucket]] = set()

    def drop(self, phase: str) -> None:
        super().drop(phase)
        self._seen = {k for k in self._seen if k[0] != phase}  # the phase's next use is a first use again

    def run(self, phase: str, bucket: Bucket, launches: Callable[[], None]) -> None:
        if (phase, bucket) in self._seen:
            self.replays += 1
            return
        launches()
        self.padded_eager += 1
        self._seen.add((phase, bucket))


class OpCount(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Torch operators dispatched while active (views and copies included; a graph replay is none)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func)
        self.ops[name] = self.ops.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def build(args: argparse.Namespace, graphs: bool | str) -> tuple[CanaryManager, CanaryBatch]:
    """A manager over a fresh pool whose ``bs`` requests hold ``ctx - 1`` tokens each, and the decode batch."""
    dev = torch.device(args.device)
    bs, ctx, chunk = args.bs, args.ctx, args.chunk
    slots = bs * ctx + 1
    k = torch.randn(slots, args.kv_heads, 128, dtype=torch.bfloat16, device=dev)
    v = torch.randn_like(k)
    r2t = torch.zeros(bs + 1, ctx, dtype=torch.int32, device=dev)
    r2t[1:] = torch.arange(1, slots, dtype=torch.int32, device=dev).view(bs, ctx)
    caps = CanaryCapacities(verify_capacity=bs * ctx, write_req_capacity=bs, write_token_capacity=bs * chunk,
                            sweep_capacity=bs * ctx + 1)
    cfg = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, backend=args.backend,
                       graphs=graphs if isinstance(graphs, bool) else False, stats_every=10**9,
                       # stubbed replays run nothing: the watchdog would rightly fail them
                       health_warmup_steps=10**9 if graphs == "stubbed" else 100)
    mgr = CanaryManager.attach(pool=KvPoolSpec(groups=(PoolGroupSpec(kind=PoolKind.FULL, k_layer0=k, v_layer0=v),),
                                               req_to_token=r2t), capacities=caps, config=cfg)
    mgr.mark_init_finished()
    if graphs == "stubbed":
        for runner in mgr._forwards:
            runner.graphs = StubbedReplays(rows_capacity=bs, tokens_capacity=bs * chunk)
    rows = torch.arange(1, bs + 1, dtype=torch.int64, device=dev)
    tokens = torch.randint(1, 32000, (bs, ctx), dtype=torch.int64, device=dev)
    chunked_prefill(mgr, rows, r2t, tokens, chunk, end_steps=True)
    decode = token_batch(rows, r2t, tokens, ctx - 1, 1)
    return mgr, decode


def time_forwards(mgr: CanaryManager, batch: CanaryBatch, *, steps: int,
                  warmup: int) -> tuple[float, float, float, float]:
    """Median host seconds of prepare + head, and of tail, per decode forward (the same batch each time: the
    records it rewrites are the same, and the host work does not depend on them); then those of the first
    decode forward (with graphs, the decode bucket's first use: its launches run eagerly, then are captured)."""
    dev = mgr.device
    head: list[float] = []
    tail: list[float] = []
    first: tuple[float, float] = (0.0, 0.0)
    for i in range(warmup + steps):
        _sync(dev)
        t0 = time.perf_counter()
        mgr.prepare(batch)
        mgr.head(batch)
        t1 = time.perf_counter()
        mgr.tail()
        t2 = time.perf_counter()
        mgr.end_step()
        if i == 0:
            first = (t1 - t0, t2 - t1)
        if i >= warmup:
            head.append(t1 - t0)
            tail.append(t2 - t1)
    _sync(dev)
    return statistics.median(head), statistics.median(tail), *first


def count_ops(mgr: CanaryManager, batch: CanaryBatch) -> tuple[OpCount, OpCount]:
    """The operators one more decode forward dispatches in prepare + head, and in tail."""
    head, tail = OpCount(), OpCount()
    with head:
        mgr.prepare(batch)
        mgr.head(batch)
    with tail:
        mgr.tail()
    mgr.end_step()
    _sync(mgr.device)
    return head, tail


def floor(device: torch.device, *, steps: int) -> float:
    """Host seconds of one replay of a one-kernel graph."""
    buf = torch.zeros(1, device=device)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        buf.add_(1)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        buf.add_(1)
    replay: list[float] = []
    for _ in range(steps):
        _sync(device)
        t0 = time.perf_counter()
        graph.replay()
        replay.append(time.perf_counter() - t0)
    _sync(device)
    return statistics.median(replay)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--bs", type=int)
    p.add_argument("--ctx", type=int, help="tokens per request after the timed decode")
    p.add_argument("--chunk", type=int, default=512, help="prefill chunk (tokens per request per forward)")
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--steps", type=int)
    p.add_argument("--out", default=None, help="results JSON (benchmarks/report.py's schema)")
    args = p.parse_args()
    cuda = args.device.startswith("cuda")
    args.bs = args.bs or (32 if cuda else 4)
    args.ctx = args.ctx or (1664 if cuda else 64)
    args.steps = args.steps or (200 if cuda else 20)
    r = Report(BENCH, machine(args.device))
    r.details.update(vars(args))
    shape = f"bs={args.bs} ctx={args.ctx} PARTIAL K+V"
    variants: list[bool | str] = [False, True] if cuda else [False, "stubbed"]
    for graphs in variants:
        mgr, batch = build(args, graphs)
        head, tail, first_head, first_tail = time_forwards(mgr, batch, steps=args.steps, warmup=10)
        ops_head, ops_tail = count_ops(mgr, batch)
        label = {False: "eager", True: "graphs", "stubbed": "graphs, replays stubbed (CPU proxy)"}[graphs]
        ft = floor(batch.input_ids.device, steps=args.steps) if cuda else None
        r.add(f"host prepare + head per forward, {label} {shape}", head, ft, unit="us",
              note="floor: one graph replay (the staged HEAD graph holds the staging copy)")
        r.add(f"host tail per forward, {label} {shape}", tail, ft, unit="us", note="floor: one graph replay")
        if graphs is True:
            r.add(f"host prepare + head, the bucket's first use (eager run, then capture) {shape}", first_head,
                  head, unit="us", note="floor: the same forward replayed")
            r.add(f"host tail, the bucket's first use (eager run, then capture) {shape}", first_tail, tail, unit="us",
                  note="floor: the same forward replayed")
        replayed = graphs is not False
        r.value(f"torch ops per forward, prepare + head, {label} {shape}", ops_head.total, 0 if replayed else None,
                unit="ops", note="floor: none (the staged replay)" if replayed else "")
        r.value(f"torch ops per forward, tail, {label} {shape}", ops_tail.total, None, unit="ops",
                note="floor: none (the replay)" if replayed else "")
        r.details[f"{label}_ops"] = {"head": ops_head.ops, "tail": ops_tail.ops}
        g = mgr.graphs[0]
        r.details[f"{label}_graph_counts"] = None if g is None else {
            "captures": g.captures, "replays": g.replays, "padded_eager": g.padded_eager}
    r.write(args.out)


if __name__ == "__main__":
    main()

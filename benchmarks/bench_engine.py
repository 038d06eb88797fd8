"""The canary's per-decode-step cost beside one layer of decode attention, and its share of an engine step.

Cases (GPU defaults: bs=128, 4096-token contexts; ``--device cpu`` shrinks everything):

- ``canary_step``: everything the manager does per decode step inside the forward: plan, HEAD verify +
  write and TAIL verify + write, for K and V (one FULL group, real-KV PARTIAL by default), over a paged
  pool whose records are all live. Eager, and replayed from a CUDA graph when the backend allows capture.
  Floor: the bytes it must move (two 32-byte records per verify entry, 4 verifies, plus plan and write
  traffic) at the device's measured copy bandwidth.
- ``attention_paged`` / ``attention_sdpa``: one decode attention layer over the same KV (bf16, 32 query
  heads, 8 KV heads, head size 128, torch SDPA): with the paged gather through req_to_token, and over
  contiguous KV. Floor: K and V bytes at the copy bandwidth.
- ``canary_vs_attention``: canary_step / attention_paged.
- ``engine_step`` / ``canary_share``: kvcanary's own engine, decode steps with and without the canary.

Each figure is printed beside its floor (benchmarks/report.py: records to ``--out``, details to ``raw/``);
times are benchmarks/timing.py's (CUDA events on a GPU, the wall clock on the CPU).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F

from benchmarks import floors, journal_cost, timing
from benchmarks.report import Report, machine
from kvcanary.consts import CanaryMode, PoolKind, RealKvHashMode
from kvcanary.manager import (
    CanaryBatch,
    CanaryCapacities,
    CanaryConfig,
    CanaryManager,
    KvPoolSpec,
    PoolGroupSpec,
    VerifyBudget,
)

BENCH = "bench_engine"


# -- the canary's per-step work ------------------------------------------------------------------------------
def token_batch(rows: torch.Tensor, r2t: torch.Tensor, tokens: torch.Tensor, start: int, n: int) -> CanaryBatch:
    """The benchmarks' square workload: request ``i`` (row ``rows[i]``) holds row ``i + 1`` of ``r2t`` and the
    tokens ``tokens[i]``; the batch is every request's tokens ``[start, start + n)``."""
    bs = int(rows.shape[0])
    zeros = torch.zeros(bs, dtype=torch.int64, device=rows.device)
    return CanaryBatch(req_pool_indices=rows, prefix_lens=zeros + start, extend_lens=zeros + n,
                       input_ids=tokens[:, start : start + n].reshape(-1),
                       positions=torch.arange(start, start + n, device=rows.device).repeat(bs),
                       out_cache_loc=r2t[1:, start : start + n].reshape(-1).to(torch.int64))


def chunked_prefill(manager: CanaryManager, rows: torch.Tensor, r2t: torch.Tensor, tokens: torch.Tensor,
                    chunk: int, *, end_steps: bool = False) -> None:
    """Stamp every record before each request's last token (``tokens.shape[1] - 1`` of them) through
    ``manager``, in forwards of ``chunk`` tokens (:func:`token_batch`); ``end_steps``: a step ends after each."""
    ctx = int(tokens.shape[1])
    for start in range(0, ctx - 1, chunk):
        with manager.forward(token_batch(rows, r2t, tokens, start, min(chunk, ctx - 1 - start))):
            pass
        if end_steps:
            manager.end_step()


class CanaryWorld:
    """A paged pool of ``bs`` requests x ``ctx`` tokens (shuffled slots), its manager, and a decode batch."""

    def __init__(self, *, bs: int, ctx: int, kv_heads: int, head_dim: int, device: torch.device,
                 mode: RealKvHashMode, backend: str | None, chunk: int, budget: VerifyBudget | None = None) -> None:
        self.bs, self.ctx, self.device = bs, ctx, device
        n = bs * ctx + 1
        self.k = torch.randn(n, kv_heads, head_dim, device=device).to(torch.bfloat16)
        self.v = torch.randn(n, kv_heads, head_dim, device=device).to(torch.bfloat16)
        g = torch.Generator().manual_seed(0)
        slots = (torch.randperm(n - 1, generator=g) + 1).view(bs, ctx)
        self.r2t = torch.zeros(bs + 1, ctx + 1, dtype=torch.int32, device=device)
        self.r2t[1:, :ctx] = slots.to(torch.int32).to(device)
        self.tokens = torch.randint(0, 32000, (bs, ctx), generator=g).to(device)
        caps = CanaryCapacities(verify_capacity=bs * ctx, write_req_capacity=bs, write_token_capacity=bs * chunk,
                                sweep_capacity=n)
        pool = KvPoolSpec(groups=(PoolGroupSpec(kind=PoolKind.FULL, k_layer0=self.k, v_layer0=self.v),),
                          req_to_token=self.r2t)
        cfg = CanaryConfig(mode=CanaryMode.LOG, real_kv_mode=mode, enable_v=True, backend=backend,
                           verify_budget=budget)
        self.manager = CanaryManager.attach(pool=pool, capacities=caps, config=cfg)
        self.manager.mark_init_finished()
        rows = torch.arange(1, bs + 1, dtype=torch.int64, device=device)
        chunked_prefill(self.manager, rows, self.r2t, self.tokens, chunk)
        self.decode = token_batch(rows, self.r2t, self.tokens, ctx - 1, 1)

    def step(self) -> None:
        """One decode step's canary work (prepare is a host-side shape check)."""
        self.manager.prepare(self.decode)
        self.manager.head(self.decode)
        self.manager.tail()

    def graph_step(self) -> Callable[[], None] | None:
        """The same work captured in a CUDA graph, or None if the selected backends cannot be captured."""
        if self.device.type != "cuda":
            return None
        from kvcanary.registry import REGISTRY, Op

        backend = self.manager.config.backend
        eager = [f"{op.value}: {c.backend.name}" for op in (Op.PLAN, Op.VERIFY, Op.WRITE)
                 if not (c := REGISTRY.select(op, self.device, backend)).support.capture_safe]
        if eager:
            print(f"  (no CUDA graph: not capture-safe: {', '.join(eager)})")
            return None
        try:
            self.manager.prepare(self.decode)
            s = torch.cuda.Stream()  # type: ignore[no-untyped-call]
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                self.manager.head(self.decode)
                self.manager.tail()
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            self.manager.prepare(self.decode)
            with torch.cuda.graph(graph):
                self.manager.head(self.decode)
                self.manager.tail()
        except Exception as exc:  # a backend that syncs with the host refuses capture
            print(f"  (CUDA graph capture unavailable: {type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
            return None
        return graph.replay

    def bytes_floor(self) -> int:
        """Least traffic of one step (:func:`canary_bytes`)."""
        cfg = self.manager.config
        return canary_bytes(bs=self.bs, ctx=self.ctx, budget=cfg.verify_budget, real_kv=cfg.real_kv_mode)


def canary_bytes(*, bs: int, ctx: int, budget: VerifyBudget | None, real_kv: RealKvHashMode) -> int:
    """Least traffic of one decode step's canary work (K and V, HEAD and TAIL) over ``bs`` requests of ``ctx``
    tokens: 4 verifies x (slot + prev record, 4 int64 plan words) per verified entry, the plan writing those 4
    words for every live entry (and, under a budget, the filter reading them), 4 writes of one record per
    request, real-KV reads."""
    entries = bs * (ctx - 1)
    verified = entries if budget is None else min(entries, budget.entries_bound(bs))
    per_verify = verified * (2 * 32 + 4 * 8)
    plan = entries * 4 * 8 * (1 if budget is None else 2)
    writes = 4 * bs * (32 + 32)
    rkv = 2 * verified * 16 if real_kv is not RealKvHashMode.NONE else 0
    return 4 * per_verify + plan + writes + rkv


def attention(world: CanaryWorld, q_heads: int) -> tuple[Callable[[], object], Callable[[], object], int]:
    """One decode attention layer over the world's KV: paged (gather through req_to_token) and contiguous."""
    bs, ctx, dev = world.bs, world.ctx, world.device
    q = torch.randn(bs, q_heads, 1, world.k.shape[-1], device=dev, dtype=torch.bfloat16)
    idx = world.r2t[1:, :ctx].to(torch.int64)
    kc = world.k[idx].transpose(1, 2).contiguous()  # [bs, kv, ctx, d]
    vc = world.v[idx].transpose(1, 2).contiguous()

    def paged() -> object:
        k = world.k[idx].transpose(1, 2)
        v = world.v[idx].transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    def contiguous() -> object:
        return F.scaled_dot_product_attention(q, kc, vc, enable_gqa=True)

    return paged, contiguous, 2 * kc.numel() * kc.element_size()


# -- the engine ----------------------------------------------------------------------------------------------
def prefilled_engine(canary: CanaryConfig | None, *, device: str, bs: int, ctx: int, steps: int,
                     journal: bool = False) -> Any:
    """kvcanary's engine with ``bs`` requests of ``ctx`` random tokens (seed 1, the same for every call),
    prefilled, each with ``steps + 4`` decode steps left at least: what every engine benchmark times, a
    steady decode batch (no request finishes inside ``steps`` steps). The prefill takes several steps when
    the chunk budget holds fewer than ``bs`` prompts, and the requests prefilled first decode meanwhile: each
    gets as many more output tokens as there are prefill steps. Decode batches are padded to one graph bucket
    of ``bs`` rows on every device, so the CPU runs the GPU configuration's host path. ``journal``: the
    engine feeds its managers' slot journals (:class:`~kvcanary.demo.engine.journal_feed.JournalFeed`)."""
    from kvcanary.demo.engine import Engine, EngineConfig

    per_chunk = max(1, min(bs, 8))  # prompts per prefill step (the chunk budget, in whole prompts)
    prefill_steps = -(-bs // per_chunk)
    new_tokens = steps + 4 + prefill_steps
    cfg = EngineConfig(num_slots=bs * (ctx + new_tokens + 4) + 1, req_rows=bs + 1, max_running=bs,
                       max_context_len=ctx + new_tokens + 4, chunk_size=ctx * per_chunk, device=device,
                       graph_buckets=(bs,))
    eng = Engine(cfg, canary=canary, journal=journal)
    eng.warmup()
    g = torch.Generator().manual_seed(1)
    for _ in range(bs):
        eng.submit(torch.randint(0, cfg.model.vocab_size, (ctx,), generator=g).tolist(), new_tokens)
    while any(r.state.value in ("waiting", "prefill") for r in eng.requests.values()):
        eng.step()
    left = min(r.max_new_tokens - r.num_outputs for r in eng.requests.values())
    if left < steps + 4:
        raise RuntimeError(f"prefilled_engine: a request has {left} decode steps left after the prefill, "
                           f"fewer than steps + 4 = {steps + 4}: the timed steps would see requests finish")
    return eng


@dataclass
class EngineTimes:
    """Median decode-step seconds of the engine without and with the canary, and what its journal feed costs
    per step (timed inside a third engine's steps, the canary one with its journals fed: the median step's;
    the feed runs between the step's tensor work, so its code and data start cold) and keeps (a mean)."""

    off: float
    on: float
    fed: float
    feed: float
    events: float
    canary_host: float
    """The median step's host seconds in the canary engine's managers (prepare, head, tail, end_step)."""


class HostClock:
    """Host seconds spent inside a manager's per-step calls, summed; installed on the instances (the engine
    calls them through the instance, so nothing else changes)."""

    CALLS = ("prepare", "head", "tail", "end_step")

    def __init__(self, managers: list[Any]) -> None:
        self.seconds = 0.0
        for m in managers:
            for name in self.CALLS:
                setattr(m, name, self._timed(getattr(m, name)))

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
        return call


def engine_step_times(*, device: str, bs: int, ctx: int, steps: int, backend: str | None) -> EngineTimes:
    """Three engines serving the same requests (without the canary, with it, with it and its journal fed),
    their steps interleaved so that drift in the machine hits all alike."""
    canary = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, backend=backend,
                          health_warmup_steps=10**6)
    engines = [prefilled_engine(c, device=device, bs=bs, ctx=ctx, steps=steps, journal=j)
               for c, j in ((None, False), (canary, False), (canary, True))]
    fed = engines[2]
    clock = HostClock(engines[1].managers)
    host: list[float] = []
    events0 = sum(m.journal.recorded + m.swa_journal.recorded for m in fed.managers)
    times: list[list[float]] = [[], [], []]
    feed: list[float] = []
    for _ in range(steps):
        for i, eng in enumerate(engines):
            f0, h0 = fed.journal_feed.seconds, clock.seconds
            times[i].append(timing.wall(eng.step, reps=1, warmup=0, include_gpu=True))
            if i == 1:
                host.append(clock.seconds - h0)
            if eng is fed:
                feed.append(fed.journal_feed.seconds - f0)
    events = sum(m.journal.recorded + m.swa_journal.recorded for m in fed.managers) - events0
    off, on, with_feed = (statistics.median(t) for t in times)
    return EngineTimes(off, on, with_feed, feed=statistics.median(feed), events=events / steps,
                       canary_host=statistics.median(host))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--bs", type=int, default=None, help="requests per decode step (default 128; cpu 4)")
    p.add_argument("--ctx", type=int, default=None, help="context tokens per request (default 4096; cpu 256)")
    p.add_argument("--q-heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--real-data", default="partial", choices=["none", "partial", "all"])
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--engine-bs", type=int, default=None, help="engine case batch (default 64; cpu 4)")
    p.add_argument("--engine-ctx", type=int, default=None, help="engine case context (default 1024; cpu 64)")
    p.add_argument("--engine-steps", type=int, default=None, help="timed engine decode steps (default 20; cpu 8)")
    p.add_argument("--skip-engine", action="store_true")
    p.add_argument("--out", default=None, help="write the JSON records here")
    args = p.parse_args(argv)
    dev = torch.device(args.device)
    cpu = dev.type == "cpu"
    if cpu:
        torch.set_num_threads(1)  # small CPU tensors: intra-op thread hand-offs cost more than they save
    bs = args.bs or (4 if cpu else 128)
    ctx = args.ctx or (256 if cpu else 4096)
    mode = RealKvHashMode[args.real_data.upper()]
    r = Report(BENCH, machine(dev))
    print(f"{BENCH} on {r.machine}: bs={bs} ctx={ctx} q_heads={args.q_heads} kv_heads={args.kv_heads} "
          f"head_dim={args.head_dim} real_data={args.real_data}")
    bw = floors.copy_bandwidth(dev, 1 << (24 if cpu else 31))
    r.floor("copy bandwidth (B/s, read + written)", bw, "a device copy")
    t0 = time.perf_counter()
    world = CanaryWorld(bs=bs, ctx=ctx, kv_heads=args.kv_heads, head_dim=args.head_dim, device=dev, mode=mode,
                        backend=args.backend, chunk=min(ctx, 512))
    print(f"  set-up (records for {bs * ctx} tokens) {time.perf_counter() - t0:.1f}s")
    tag = f"bs={bs} ctx={ctx} real_data={args.real_data}"
    reps = 5 if cpu else 20
    canary = timing.device_time(world.step, dev, warmup=1 if cpu else 3, reps=reps)
    canary_floor = world.bytes_floor() / bw
    r.add(f"canary_step eager {tag}", canary, canary_floor)
    replay = world.graph_step()
    if replay is not None:
        r.add(f"canary_step cuda_graph {tag}", timing.device_time(replay, dev, reps=reps), canary_floor)
    world.manager.end_step()
    world.manager.flush()
    if world.manager.total_violations:
        print(f"  WARNING: {world.manager.total_violations} violations on a clean pool (first: "
              f"{world.manager.events[0].message.splitlines()[0]})")
    paged, contiguous, kv_bytes = attention(world, args.q_heads)
    attn = timing.device_time(paged, dev, reps=reps)
    r.add(f"attention_paged bf16 q{args.q_heads}/kv{args.kv_heads}/d{args.head_dim} {tag}", attn, kv_bytes / bw)
    r.add(f"attention_sdpa bf16 contiguous {tag}", timing.device_time(contiguous, dev, reps=reps), kv_bytes / bw)
    r.value(f"canary_vs_attention {tag}", canary / attn, canary_floor / (kv_bytes / bw), unit="x")
    sink_s = journal_cost.sink_step_seconds(world.manager)
    busy, busy_floor = journal_cost.busy_block_step_seconds()
    r.add("journal busy block per step, owner map's release path", busy, busy_floor, unit="us",
          note="journal_cost.busy_block_feed: 8 requests share and release block 0 beside 48 writes, holders() "
               "per released block, a full ring (2**18 of its events on block 0); floor: the step's 64 events "
               "copied into machine arrays")
    del world
    if not args.skip_engine:
        ebs = args.engine_bs or (4 if cpu else 64)
        ectx = args.engine_ctx or (64 if cpu else 1024)
        steps = args.engine_steps or (8 if cpu else 20)
        et = engine_step_times(device=args.device, bs=ebs, ctx=ectx, steps=steps, backend=args.backend)
        off, on = et.off, et.on
        etag = f"kvcanary engine bs={ebs} ctx={ectx}"
        r.add(f"engine_step without canary {etag}", off, off, unit="ms")
        r.add(f"engine_step with canary {etag}", on, off, unit="ms")
        r.value(f"canary_share {etag}", (on - off) / on * 100, None, unit="%", note="of the engine's decode step")
        jour, jfloor = journal_cost.journal_step_seconds(bs=ebs, block_size=1)
        r.add(f"journal per decode step bs={ebs} block=1", jour, jfloor, unit="us",
              note="journal_cost.JOURNAL_FEED in the demo pool's one-slot blocks (one record_each a step, flushes "
                   "and folds amortised in: a journal whose ring is full); floor: the step's blocks, positions "
                   "and owner codes copied into machine arrays")
        r.add(f"engine_step with canary + journal fed {etag}", et.fed, off, unit="ms")
        r.add(f"journal feed per step, timed in the engine {etag}", et.feed, journal_cost.append_seconds(et.events),
              unit="us", note=f"the demo engine's JournalFeed, {et.events:.1f} events a step; floor: as many "
                              "events copied into machine arrays")
        r.add(f"bundle sink per step, nothing fires {etag}", sink_s, None, unit="us")
        r.add(f"canary host time per step {etag}", et.canary_host, None, unit="us",
              note="the managers' prepare, head, tail and end_step, timed inside the canary engine's steps")
        r.value(f"journal_share {etag}", (jour + sink_s) / et.canary_host * 100, None, unit="%",
                note="journal + sink of the canary's own per-step host time; goal < 2")
        r.value(f"journal_feed_share {etag}", (et.feed + sink_s) / et.canary_host * 100, None, unit="%",
                note="the feed timed in the engine + sink, of the canary's own per-step host time; goal < 2")
    r.write(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

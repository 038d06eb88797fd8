"""The canary's share of a fast engine's decode step: a replayed CUDA graph of an 8B-Llama-shaped model.

The step (random bf16 weights shaped like an 8-billion-parameter Llama: 32 layers, hidden 4096, 32 query
heads, 8 KV heads of 128, MLP 14336, vocabulary 128256; nothing downloaded): embedding; per layer RMSNorm,
QKV projection, rotary, the new token's K and V written into a paged pool (token-major slots, shuffled,
through ``req_to_token``), decode attention over each request's context gathered through the page table
(torch SDPA), O projection, RMSNorm, gated MLP; final RMSNorm, LM head, argmax. ``bs`` requests of ``ctx``
tokens (GPU: bs 64 and 128 x 2048 and 4096). It is captured once into a CUDA graph over static inputs and
the same decode step is replayed (each replay attends over ``ctx`` tokens and writes token ``ctx - 1``'s KV).
Where the pool of every layer does not fit beside the weights (bs 128 x 4096 on an 80 GB card), layers share
KV buffers round-robin (``--kv-buffers`` sets their number): each layer still reads its own ``bs x ctx``
tokens, so the traffic is the same; the case's name then says ``KV in N buffers``.

Three graphs over the same pool and static inputs, taking turns step by step (drift hits all alike):

- ``model``: the step alone;
- ``full``: the step between a CanaryManager's HEAD and TAIL (one FULL group, K and V, real-KV PARTIAL,
  layer 0's K and V as the fingerprinted source), captured inside the same graph;
- ``budget``: the same with ``CanaryConfig.verify_budget`` (``VerifyBudget(max_entries=live // 16)``).

Each step runs as an engine runs it: ``prepare()`` on the host, replay, ``end_step()`` on the host while the
GPU works, then wait for the step's output. Figures per case (benchmarks/report.py; ``--out``):

- ``step device time``: CUDA events around the model's replay; floor: its bytes (weights, the KV it reads)
  at the measured copy bandwidth. ``step wall time``: the host's whole step; floor: the device time.
- ``canary device time``: median over steps of the variant's device time (the replay and the read-back copy
  ``end_step`` enqueues) minus the model's in the same round; floor: the canary's bytes
  (bench_engine.canary_bytes) at copy bandwidth. Its share of the model's step beside the goal (1 % full,
  0.2 % with the budget), and its share of the step's floor (an engine whose step ran at copy bandwidth).
- ``canary host time``: prepare + end_step on the wall clock; floor: enqueueing one asynchronous copy of the
  state's snapshot to pinned memory (the read-back a step must at least start). ``not hidden``: median over
  steps of the variant's wall time minus the model's, less the canary's device time (at least 0); floor 0.
- ``canary share of the wall step``: the variant's wall time minus the model's, over the model's.
- ``canary alone``: HEAD + TAIL in a graph of their own, replayed back to back (a cross-check; the records
  stay warm in L2, unlike in the step).

``--device cpu`` shrinks everything (2 layers, hidden 256, bs 4, 128 tokens, eager: no graphs) to check the
script itself; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F

from benchmarks import floors, timing
from benchmarks.bench_engine import canary_bytes, chunked_prefill
from benchmarks.report import Report, machine
from kvcanary.consts import NUM_LAUNCH_TAGS, VIOLATION_FIELDS, CanaryMode, PoolKind, RealKvHashMode
from kvcanary.manager import (
    CanaryBatch,
    CanaryCapacities,
    CanaryConfig,
    CanaryManager,
    KvPoolSpec,
    PoolGroupSpec,
    VerifyBudget,
)

BENCH = "bench_fast_step"
GOALS = {"full": 1.0, "budget": 0.2}
"""The canary's largest share of the step, in %, per variant."""


@dataclass(frozen=True)
class ModelShape:
    """A Llama-style decoder's sizes."""

    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @property
    def qkv(self) -> int:
        return (self.q_heads + 2 * self.kv_heads) * self.head_dim

    def layer_params(self) -> int:
        h = self.hidden
        return h * self.qkv + self.q_heads * self.head_dim * h + 3 * h * self.intermediate + 2 * h

    def params(self) -> int:
        return self.layers * self.layer_params() + 2 * self.vocab * self.hidden + self.hidden


LLAMA_8B = ModelShape(layers=32, hidden=4096, q_heads=32, kv_heads=8, head_dim=128, intermediate=14336,
                      vocab=128256)
SMOKE = ModelShape(layers=2, hidden=256, q_heads=4, kv_heads=2, head_dim=64, intermediate=512, vocab=1024)


def _randn(*shape: int, device: torch.device, scale: float) -> torch.Tensor:
    return torch.randn(*shape, dtype=torch.bfloat16, device=device).mul_(scale)


@dataclass
class Layer:
    ln1: torch.Tensor
    wqkv: torch.Tensor
    wo: torch.Tensor
    ln2: torch.Tensor
    wgu: torch.Tensor
    wdown: torch.Tensor


class Weights:
    """Random bf16 weights, scaled by 1/sqrt(fan-in) so activations stay finite through every layer."""

    def __init__(self, shape: ModelShape, device: torch.device) -> None:
        h, s = shape.hidden, shape
        torch.manual_seed(0)
        self.embed = _randn(s.vocab, h, device=device, scale=1.0)
        self.layers = [
            Layer(ln1=torch.ones(h, dtype=torch.bfloat16, device=device),
                  wqkv=_randn(h, s.qkv, device=device, scale=h**-0.5),
                  wo=_randn(s.q_heads * s.head_dim, h, device=device, scale=(s.q_heads * s.head_dim) ** -0.5),
                  ln2=torch.ones(h, dtype=torch.bfloat16, device=device),
                  wgu=_randn(h, 2 * s.intermediate, device=device, scale=h**-0.5),
                  wdown=_randn(s.intermediate, h, device=device, scale=s.intermediate**-0.5))
            for _ in range(s.layers)]
        self.norm = torch.ones(h, dtype=torch.bfloat16, device=device)
        self.lm_head = _randn(h, s.vocab, device=device, scale=h**-0.5)


class Pool:
    """The paged KV pool of ``bs`` requests x ``ctx`` tokens (shuffled slots; slot 0 is padding) in
    ``buffers`` K and V buffers (layer ``i`` uses buffer ``i % buffers``), and the step's static inputs."""

    def __init__(self, shape: ModelShape, *, bs: int, ctx: int, buffers: int, device: torch.device) -> None:
        self.bs, self.ctx, self.device = bs, ctx, device
        n = bs * ctx + 1
        kvh, d = shape.kv_heads, shape.head_dim
        self.k = [_randn(n, kvh, d, device=device, scale=1.0) for _ in range(buffers)]
        self.v = [_randn(n, kvh, d, device=device, scale=1.0) for _ in range(buffers)]
        g = torch.Generator().manual_seed(0)
        slots = (torch.randperm(n - 1, generator=g) + 1).view(bs, ctx)
        self.r2t = torch.zeros(bs + 1, ctx + 1, dtype=torch.int32, device=device)
        self.r2t[1:, :ctx] = slots.to(torch.int32).to(device)
        self.tokens = torch.randint(0, shape.vocab, (bs, ctx), generator=g).to(device)
        self.rows = torch.arange(1, bs + 1, dtype=torch.int64, device=device)
        # the step's static inputs: the decode of token ctx - 1 of every request
        self.gather = self.r2t[1:, :ctx].to(torch.int64)  # [bs, ctx]: each request's slots, the page table
        self.loc = self.r2t[1:, ctx - 1].to(torch.int64)
        self.positions = torch.full((bs,), ctx - 1, dtype=torch.int64, device=device)
        self.input_ids = self.tokens[:, ctx - 1].contiguous()
        self.next_ids = torch.zeros(bs, dtype=torch.int64, device=device)

    @staticmethod
    def slot_bytes(shape: ModelShape) -> int:
        """One slot's K (or V) bytes in one buffer."""
        return shape.kv_heads * shape.head_dim * 2

    def kv_read_bytes(self, shape: ModelShape) -> int:
        """K and V bytes the step's attention reads over every layer."""
        return shape.layers * 2 * self.bs * self.ctx * self.slot_bytes(shape)


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * w


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.float().chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1).to(x.dtype)


class Model:
    """One decode step of the model over the pool: reads the pool's static inputs, writes ``next_ids``."""

    def __init__(self, shape: ModelShape, weights: Weights, pool: Pool) -> None:
        self.shape, self.w, self.pool = shape, weights, pool
        d = shape.head_dim
        self.inv_freq = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=pool.device).float() / d))

    def step(self) -> None:
        s, w, p = self.shape, self.w, self.pool
        bs, d = p.bs, s.head_dim
        freqs = p.positions.float()[:, None] * self.inv_freq  # [bs, d/2]
        cos, sin = freqs.cos()[:, None, :], freqs.sin()[:, None, :]
        x = w.embed[p.input_ids]
        for i, layer in enumerate(w.layers):
            h = _rms(x, layer.ln1)
            qkv = h @ layer.wqkv
            nq, nk = s.q_heads * d, s.kv_heads * d
            q, k, v = qkv[:, :nq], qkv[:, nq : nq + nk], qkv[:, nq + nk :]
            q = _rotate(q.view(bs, s.q_heads, d), cos, sin)
            k = _rotate(k.view(bs, s.kv_heads, d), cos, sin)
            kb, vb = p.k[i % len(p.k)], p.v[i % len(p.v)]
            kb.index_copy_(0, p.loc, k)
            vb.index_copy_(0, p.loc, v.reshape(bs, s.kv_heads, d))
            keys = kb[p.gather].transpose(1, 2)  # [bs, kv_heads, ctx, d], gathered through the page table
            values = vb[p.gather].transpose(1, 2)
            o = F.scaled_dot_product_attention(q.unsqueeze(2), keys, values, enable_gqa=True)
            x = x + o.reshape(bs, s.q_heads * d) @ layer.wo
            h = _rms(x, layer.ln2)
            gate, up = (h @ layer.wgu).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ layer.wdown
        logits = _rms(x, w.norm) @ w.lm_head
        torch.argmax(logits, dim=-1, out=p.next_ids)

    def bytes_floor(self) -> int:
        """Weights (every layer, the LM head, the embedding rows read) and the KV the attention reads."""
        s, p = self.shape, self.pool
        weights = (s.layers * s.layer_params() + s.vocab * s.hidden + s.hidden + p.bs * s.hidden) * 2
        return weights + p.kv_read_bytes(s)


def attach_canary(pool: Pool, *, budget: VerifyBudget | None, backend: str | None, chunk: int,
                  graphs: bool | None = None) -> tuple[CanaryManager, CanaryBatch]:
    """A manager over the pool (layer 0's K and V fingerprinted), every record of the ``ctx - 1`` tokens
    before the decode stamped by a chunked prefill through it, and the decode's batch over the step's
    static inputs. ``graphs``: ``CanaryConfig.graphs`` (None: the manager's default)."""
    bs, ctx, dev = pool.bs, pool.ctx, pool.device
    caps = CanaryCapacities(verify_capacity=bs * ctx, write_req_capacity=bs, write_token_capacity=bs * chunk,
                            sweep_capacity=bs * ctx + 1)
    spec = KvPoolSpec(groups=(PoolGroupSpec(kind=PoolKind.FULL, k_layer0=pool.k[0], v_layer0=pool.v[0]),),
                      req_to_token=pool.r2t)
    cfg = CanaryConfig(mode=CanaryMode.LOG, real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, backend=backend,
                       verify_budget=budget, graphs=graphs)
    manager = CanaryManager.attach(pool=spec, capacities=caps, config=cfg)
    manager.mark_init_finished()
    chunked_prefill(manager, pool.rows, pool.r2t, pool.tokens, chunk)
    manager.end_step()
    zeros = torch.zeros(bs, dtype=torch.int64, device=dev)
    decode = CanaryBatch(req_pool_indices=pool.rows, prefix_lens=zeros + (ctx - 1), extend_lens=zeros + 1,
                         input_ids=pool.input_ids, positions=pool.positions, out_cache_loc=pool.loc)
    return manager, decode


@dataclass
class Variant:
    """One way to run the step: its replay and, with a canary, its manager and decode batch."""

    name: str
    replay: Callable[[], object]
    manager: CanaryManager | None = None
    batch: CanaryBatch | None = None
    device_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    host_s: list[float] = field(default_factory=list)


def capture(body: Callable[[], None], before: Callable[[], None], device: torch.device,
            pool: Any) -> Callable[[], object]:
    """``body`` captured in a CUDA graph (``before`` runs on the host ahead of the warm-up and the capture);
    eager elsewhere: ``before`` then ``body``. Graphs share one memory pool: they never run concurrently and
    hold no tensors between replays (outputs go to static buffers)."""
    if device.type != "cuda":
        def eager() -> None:
            before()
            body()
        return eager
    before()
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        body()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    before()
    with torch.cuda.graph(graph, pool=pool):
        body()
    torch.cuda.synchronize()
    return graph.replay


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_steps(variants: list[Variant], *, steps: int, warmup: int, device: torch.device) -> None:
    """``warmup + steps`` rounds; each round runs every variant's step once (the order rotating), as an engine
    does: prepare (host), replay, end_step (host, while the GPU works), wait for the output. Records the
    device time (replay and end_step's copies), the wall time and the canary's host time of each step."""
    cuda = device.type == "cuda"
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)] if cuda else []  # type: ignore[no-untyped-call]
    for i in range(warmup + steps):
        k = i % len(variants)
        for v in variants[k:] + variants[:k]:
            _sync(device)
            t0 = time.perf_counter()
            if v.manager is not None and v.batch is not None:
                v.manager.prepare(v.batch)
            t1 = time.perf_counter()
            if cuda:
                ev[0].record()
            v.replay()
            t2 = time.perf_counter()
            if v.manager is not None:
                v.manager.end_step()
            t3 = time.perf_counter()
            if cuda:
                ev[1].record()
                ev[1].synchronize()
            t4 = time.perf_counter()
            if i < warmup:
                continue
            v.device_s.append(ev[0].elapsed_time(ev[1]) / 1e3 if cuda else t2 - t1)
            v.wall_s.append(t4 - t0)
            v.host_s.append((t1 - t0) + (t3 - t2))


def _paired(a: list[float], b: list[float]) -> float:
    """Median over rounds of ``b - a``."""
    return float(statistics.median(y - x for x, y in zip(a, b, strict=True)))


def host_floor(manager: CanaryManager, device: torch.device) -> float:
    """Seconds to enqueue one asynchronous copy of the state's snapshot (its size) to pinned host memory."""
    size = 2 + 2 * NUM_LAUNCH_TAGS + manager.config.ring_capacity * VIOLATION_FIELDS
    src = torch.zeros(size, dtype=torch.int64, device=device)
    dst = torch.zeros(size, dtype=torch.int64, pin_memory=device.type == "cuda")
    return timing.wall(lambda: dst.copy_(src, non_blocking=True), calls=200, reps=7, warmup=20)


def kv_buffers(shape: ModelShape, *, bs: int, ctx: int, device: torch.device, chunk: int) -> int:
    """How many layers' K and V buffers fit in the device's free memory beside the step's workspace (every
    layer's on the CPU)."""
    if device.type != "cuda":
        return shape.layers
    torch.cuda.empty_cache()  # blocks cached by earlier cases count as used in mem_get_info
    per_layer = 2 * (bs * ctx + 1) * Pool.slot_bytes(shape)
    gathered = 4 * bs * ctx * Pool.slot_bytes(shape)  # one layer's gathered K and V, and room for a copy
    canary = 2 * (bs * ctx * (8 * 32 + 2 * 4 * 8) + bs * chunk * 64)  # two managers' records, plans, staging
    free = torch.cuda.mem_get_info(device)[0] - gathered - canary - (4 << 30)
    n = min(shape.layers, free // per_layer)
    if n < 1:
        raise RuntimeError(f"bench_fast_step: bs={bs} ctx={ctx} leaves no room for one layer's KV "
                           f"({per_layer / 2**30:.1f} GiB) beside the weights; lower --bs or --ctx")
    return int(n)


def bench_case(r: Report, shape: ModelShape, weights: Weights, *, bs: int, ctx: int, steps: int, warmup: int,
               budget_frac: int, backend: str | None, bw: float, device: torch.device,
               buffers: int | None = None) -> int:
    """One (bs, ctx) case: its rows in ``r``; returns the violations the managers reported (0 expected).
    ``buffers``: KV buffers of the pool (default: as many layers as fit, :func:`kv_buffers`)."""
    chunk = min(ctx, 512)
    buffers = min(shape.layers, buffers or kv_buffers(shape, bs=bs, ctx=ctx, device=device, chunk=chunk))
    t0 = time.perf_counter()
    pool = Pool(shape, bs=bs, ctx=ctx, buffers=buffers, device=device)
    model = Model(shape, weights, pool)
    live = bs * (ctx - 1)
    budget = VerifyBudget(max_entries=max(1, live // budget_frac))
    managers = {"full": attach_canary(pool, budget=None, backend=backend, chunk=chunk),
                "budget": attach_canary(pool, budget=budget, backend=backend, chunk=chunk)}
    mem = torch.cuda.graph_pool_handle() if device.type == "cuda" else None
    variants = [Variant("model", capture(model.step, lambda: None, device, mem))]
    for name, (m, batch) in managers.items():
        def body(m: CanaryManager = m, batch: CanaryBatch = batch, step: Callable[[], None] = model.step) -> None:
            m.head(batch)
            step()
            m.tail()

        def before(m: CanaryManager = m, batch: CanaryBatch = batch) -> None:
            m.prepare(batch)

        variants.append(Variant(name, capture(body, before, device, mem), m, batch))
    how = "graph" if device.type == "cuda" else "eager"
    aliased = f", KV in {buffers} buffers" if buffers < shape.layers else ""
    tag = f"bs={bs} ctx={ctx}{aliased}"
    r.note(f"  case {tag}: set-up and capture {time.perf_counter() - t0:.1f}s")
    if aliased:
        r.note(f"  ({shape.layers} layers' KV does not fit beside the weights: layer i uses buffer i % {buffers}; "
               "each layer still reads its own bs x ctx tokens)")
    run_steps(variants, steps=steps, warmup=warmup, device=device)
    model_v = variants[0]
    step_dev = statistics.median(model_v.device_s)
    step_wall = statistics.median(model_v.wall_s)
    step_floor = model.bytes_floor() / bw
    r.add(f"step device time, model only {tag}", step_dev, step_floor, unit="ms",
          note="floor: weights + KV read at copy bandwidth")
    r.add(f"step wall time, model only {tag}", step_wall, step_dev, unit="ms", note="floor: its device time")
    violations = 0
    for v in variants[1:]:
        assert v.manager is not None and v.batch is not None
        m, vb = v.manager, v.batch
        vname = "full" if v.name == "full" else f"budget 1/{budget_frac}"
        goal = GOALS[v.name]
        cfloor = canary_bytes(bs=bs, ctx=ctx, budget=m.config.verify_budget, real_kv=m.config.real_kv_mode) / bw
        dev = _paired(model_v.device_s, v.device_s)
        wall = _paired(model_v.wall_s, v.wall_s)
        host = statistics.median(v.host_s)
        share = dev / step_dev * 100
        wshare = wall / step_wall * 100
        r.add(f"canary device time, {vname} {tag}", dev, cfloor, note="in the step: variant - model, paired")
        r.value(f"canary device share of the step, {vname} {tag}", share, cfloor / step_dev * 100, unit="%",
                note=f"goal <= {goal} %: {'PASS' if share <= goal else 'MISS'}")
        r.value(f"canary device share of the step's floor, {vname} {tag}", dev / step_floor * 100,
                cfloor / step_floor * 100, unit="%", note="the step at copy bandwidth")
        r.add(f"canary host time (prepare + end_step), {vname} {tag}", host, host_floor(m, device),
              note="floor: one async D2H enqueue")
        r.add(f"canary host time not hidden, {vname} {tag}", max(0.0, wall - dev), 0.0,
              note="wall - model's wall - canary device time")
        r.value(f"canary share of the wall step, {vname} {tag}", wshare, cfloor / step_wall * 100, unit="%",
                note=f"goal <= {goal} %: {'PASS' if wshare <= goal else 'MISS'}")

        def alone(m: CanaryManager = m, vb: CanaryBatch = vb) -> None:
            m.head(vb)
            m.tail()

        def prep(m: CanaryManager = m, vb: CanaryBatch = vb) -> None:
            m.prepare(vb)

        replay = capture(alone, prep, device, mem)
        secs = timing.device_time(replay, device, reps=20 if device.type == "cuda" else 5, warmup=2)
        r.add(f"canary alone (HEAD + TAIL {how}), {vname} {tag}", secs, cfloor, note="back to back, warm L2")
        m.end_step()
        m.flush()
        if m.total_violations:
            violations += m.total_violations
            r.note(f"  WARNING: {v.name}: {m.total_violations} violations on a clean pool (first: "
                   f"{m.events[0].message.splitlines()[0]})")
    return violations


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--bs", type=int, nargs="+", default=None, help="requests per step (default 64 128; cpu 4)")
    p.add_argument("--ctx", type=int, nargs="+", default=None,
                   help="context tokens per request (default 2048 4096; cpu 128)")
    p.add_argument("--steps", type=int, default=None, help="timed rounds per case (default 50; cpu 5)")
    p.add_argument("--warmup", type=int, default=None, help="untimed rounds first (default 5; cpu 1)")
    p.add_argument("--budget-frac", type=int, default=16,
                   help="the budget verifies at most live entries / this per step (default 16)")
    p.add_argument("--kv-buffers", type=int, default=None,
                   help="K and V buffers of the pool, layers sharing them round-robin (default: as many as fit)")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--quick", action="store_true", help="one case (the smallest), few rounds")
    p.add_argument("--out", default=None, help="write the JSON records here")
    args = p.parse_args(argv)
    dev = torch.device(args.device)
    cpu = dev.type == "cpu"
    if cpu:
        torch.set_num_threads(1)  # small CPU tensors: intra-op thread hand-offs cost more than they save
    shape = SMOKE if cpu else LLAMA_8B
    sizes = [(b, c) for b in (args.bs or ([4] if cpu else [64, 128])) for c in (args.ctx or ([128] if cpu else
                                                                                             [2048, 4096]))]
    if args.budget_frac < 1:
        raise SystemExit(f"bench_fast_step: --budget-frac must be >= 1, got {args.budget_frac}")
    if args.kv_buffers is not None and args.kv_buffers < 1:
        raise SystemExit(f"bench_fast_step: --kv-buffers must be >= 1, got {args.kv_buffers}")
    if args.quick:
        sizes = sizes[:1]
    steps = args.steps or (3 if args.quick else 5 if cpu else 50)
    warmup = args.warmup or (1 if cpu or args.quick else 5)
    r = Report(BENCH, machine(dev))
    print(f"{BENCH} on {r.machine}: {shape.params() / 1e9:.2f}B params ({shape}), cases {sizes}, "
          f"{steps} rounds after {warmup}")
    bw = floors.copy_bandwidth(dev, 1 << (24 if cpu else 31))
    r.floor("copy bandwidth (B/s, read + written)", bw, "a device copy")
    t0 = time.perf_counter()
    weights = Weights(shape, dev)
    _sync(dev)
    r.note(f"  weights {shape.params() * 2 / 2**30:.1f} GiB in {time.perf_counter() - t0:.1f}s")
    violations = 0
    failed: list[str] = []
    for bs, ctx in sizes:
        try:
            violations += bench_case(r, shape, weights, bs=bs, ctx=ctx, steps=steps, warmup=warmup,
                                     budget_frac=args.budget_frac, backend=args.backend, bw=bw, device=dev,
                                     buffers=args.kv_buffers)
        except torch.OutOfMemoryError as exc:  # the other cases still run; the exit status says it
            failed.append(f"bs={bs} ctx={ctx}")
            r.note(f"  case bs={bs} ctx={ctx} skipped, out of memory: {str(exc).splitlines()[0][:200]}")
        gc.collect()  # the case's graphs, pool and managers (the managers hold reference cycles)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    r.write(args.out)
    if violations:
        print(f"{BENCH}: {violations} violations on a clean pool: the figures above are not of a clean run")
        return 1
    if failed:
        print(f"{BENCH}: cases out of memory: {failed}")
        return 1
    return 0 if all(math.isfinite(row.figure) for row in r.rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

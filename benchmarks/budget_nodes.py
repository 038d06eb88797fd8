"""Where the budgeted forward's canary device time goes: its HEAD + TAIL graph, node group by node group.

bench_fast_step's budgeted canary (one FULL group, K and V, real-KV PARTIAL, ``VerifyBudget(max_entries=live //
16)``, layer 0 of an 8B-Llama-shaped pool fingerprinted) over ``bs`` requests of ``ctx`` tokens, prefilled; then
one decode forward's HEAD and TAIL as the manager launches them inside an engine's captured forward (unbucketed:
the manager's own graphs off), split into the groups of nodes they launch:

- ``staging``: the batch's copy into the forward slot's static buffers;
- ``plan``: the plan kernel over every live entry;
- ``verify_budget``: the budget's filter of that plan (which also counts the full plan's overflow into
  ``skipped_verifies``: with a budget, TAIL launches no overflow count of its own);
- ``verify``: the HEAD and TAIL verifies, K and V (4 launches);
- ``write``: the HEAD and TAIL writes, K and V (4 launches).

Variants: ``all`` (the manager's own ``head()`` + ``tail()``: captured, each phase's V launches run on the
manager's second stream, :mod:`kvcanary.manager.branch`); ``all, sequential`` (the same with the forward runner's
``branch`` set to None: K's launches, then V's, one chain); ``all, in turn`` (the groups' launches in the
manager's order, one after another, through the forward runner's own methods: the same launches and graph nodes
as ``all, sequential``, which is checked); per group ``without G`` (every other group, in turn) and ``G alone``;
``V on a second branch`` (``all, in turn`` with each phase's V launches forked onto a second stream, composed
here: the same launches and graph nodes as ``all``, which is checked) and the what-if ``K only`` (the V
endpoints' launches left out: what a K and V verify, and a K and V write, as one launch each would approach;
their bytes left out too, so a lower bound). Each variant is captured into a CUDA graph and timed with CUDA events two
ways: ``warm``, ``--rounds`` rounds back to back in one graph (the records stay in L2), per round; ``cold``, one
round per replay with L2 flushed before each (a memset of ``--flush-mib`` MiB outside the events), as in a model's
step. Each row prints its nodes (the graph's, counted through the CUDA runtime where it answers, else the
launches counted on the host) and its floor: the larger of its bytes at the measured copy bandwidth and its nodes
times one empty kernel's time in a replayed graph (the latency a dependent node costs whatever its work).

``--device cpu`` runs every variant eagerly at a small shape (no graphs: both columns are the wall clock): it
checks the script; its figures mean nothing. Usage (repository root)::

    python benchmarks/budget_nodes.py [--device cuda] [--bs 64] [--ctx 2048] [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from benchmarks import floors, timing
from benchmarks.bench_fast_step import LLAMA_8B, SMOKE, Pool, attach_canary
from benchmarks.budget_launches import _OpCounter
from benchmarks.report import Report, machine
from kvcanary.manager import CanaryBatch, CanaryManager, VerifyBudget
from kvcanary.manager.endpoints import Endpoint
from kvcanary.manager.forward import ForwardRunner

BENCH = "budget_nodes"
GROUPS = ("staging", "plan", "verify_budget", "verify", "write")
Fn = Callable[[], object]


@dataclass(frozen=True)
class Node:
    """One launch of the forward (a kernel or a torch op) and the group it belongs to."""

    group: str
    fn: Fn
    half: str = ""
    """``k`` or ``v`` for an endpoint's verify or write, else empty."""
    phase: str = ""
    """``head`` or ``tail`` for an endpoint's verify or write, else empty."""


def forward_nodes(runner: ForwardRunner, batch: CanaryBatch) -> list[Node]:
    """The budgeted forward's HEAD and TAIL launches in the manager's order (``ForwardRunner._plan_and_head``
    after staging, then ``_tail``), through the runner's own per-node methods; group 0 only (one FULL group). The
    overflow count is the filter's (``_filter`` passes it ``skipped_verifies``): no node of its own."""
    if len(runner.plans) != 1 or not runner.budgets:
        raise ValueError("budget_nodes: the forward must have one group and a verify budget")
    bs = batch.batch_size
    v = runner.staging.load(batch)  # the views every forward of this batch fills (fixed addresses)
    gp = runner.plans[0]
    nodes = [Node("staging", lambda: runner.staging.load(batch)), Node("plan", lambda: runner._plan(0, v)),
             Node("verify_budget", lambda: runner._filter(0, v, bs, None))]

    def verify(ep: Endpoint) -> Fn:
        return lambda: runner._verify_one(0, ep)

    def write(ep: Endpoint) -> Fn:
        return lambda: runner._write_one(0, ep, v)

    for eps in (gp.head, gp.tail):
        for ep in eps:
            h, ph = ep.half.value, ep.phase.value
            nodes += [Node("verify", verify(ep), h, ph), Node("write", write(ep), h, ph)]
    return nodes


def v_branch(nodes: list[Node], device: torch.device) -> Fn:
    """The forward in turn but for each phase's V endpoint launches, on a second stream forked before the phase's
    K launches and joined after them (composed: what the manager's own capture does; eager and in order on the
    CPU)."""
    if device.type != "cuda":
        return run_all([n.fn for n in nodes])
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]

    def phase(name: str) -> Fn:
        k = [n.fn for n in nodes if n.phase == name and n.half == "k"]
        v = [n.fn for n in nodes if n.phase == name and n.half == "v"]

        def run() -> None:
            main = torch.cuda.current_stream()
            side.wait_stream(main)
            with torch.cuda.stream(side):
                for f in v:
                    f()
            for f in k:
                f()
            main.wait_stream(side)
        return run

    steps: list[Fn] = []
    seen: set[str] = set()
    for n in nodes:  # the nodes outside the phases' endpoints in place, each phase's at its first node
        if not n.phase:
            steps.append(n.fn)
        elif n.phase not in seen:
            seen.add(n.phase)
            steps.append(phase(n.phase))
    return run_all(steps)


def run_all(fns: list[Fn]) -> Fn:
    def each() -> None:
        for f in fns:
            f()
    return each


def host_launches(fn: Fn) -> int:
    """Launches of one eager call of ``fn``: kvcanary kernels (a launcher's call) and the aten ops outside
    them that do device work (views left out)."""
    import benchmarks.budget_launches as bl
    from kvcanary.manager import budget as budget_mod
    from kvcanary.manager import forward as forward_mod

    counter = _OpCounter()
    kernels = 0
    saved: list[tuple[object, str, object]] = []

    def wrap(mod: object, name: str) -> None:
        impl = getattr(mod, name)

        def launch(*args: object, **kwargs: object) -> object:
            nonlocal kernels
            if not counter.in_kernel:
                kernels += 1
            was, counter.in_kernel = counter.in_kernel, True
            try:
                return impl(*args, **kwargs)
            finally:
                counter.in_kernel = was
        saved.append((mod, name, impl))
        setattr(mod, name, launch)

    for name in ("launch_canary_plan_kernels", "launch_canary_verify_kernel", "launch_canary_write_kernel"):
        wrap(forward_mod, name)
    wrap(budget_mod, "launch_verify_budget_kernel")
    counts = bl.Counts()
    try:
        with counter:
            counter.counts = counts
            fn()
            counter.counts = None
    finally:
        for mod, name, impl in saved:
            setattr(mod, name, impl)
    return kernels + sum(n for op, n in counts.ops.items() if op not in bl._VIEWS)


def graph_nodes(graph: torch.cuda.CUDAGraph) -> int | None:
    """The captured graph's node count (the driver's ``cuGraphGetNodes``; a ``cudaGraph_t`` is a ``CUgraph``), or
    None where the driver or torch does not answer."""
    try:
        raw = graph.raw_cuda_graph()
        lib = ctypes.CDLL("libcuda.so.1")
    except (AttributeError, RuntimeError, OSError):
        return None
    count = ctypes.c_size_t(0)
    if lib.cuGraphGetNodes(ctypes.c_void_p(raw), None, ctypes.byref(count)) != 0:
        return None
    return int(count.value)


@dataclass
class Timed:
    """One variant's figures: seconds warm (per round, back to back) and cold (L2 flushed), and its nodes."""

    warm: float
    cold: float
    nodes: int
    graph_nodes: int | None


def time_variant(fn: Fn, device: torch.device, *, rounds: int, reps: int, flush: torch.Tensor | None) -> Timed:
    """``fn`` captured in CUDA graphs (one of ``rounds`` rounds, one of a single round) and timed; eager on the
    CPU. ``fn`` runs eagerly once first (on a side stream on a GPU: kernels compiled and loaded)."""
    nodes = host_launches(fn)
    if device.type != "cuda":
        secs = timing.wall(fn, reps=reps, warmup=1)
        return Timed(secs, secs, nodes, None)
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    kept = True
    try:
        one = torch.cuda.CUDAGraph(keep_graph=True)  # its cudaGraph_t stays readable (graph_nodes)
    except TypeError:  # a torch without the option: no node count from the runtime
        one, kept = torch.cuda.CUDAGraph(), False
    with torch.cuda.graph(one):
        fn()
    if kept:
        one.instantiate()
    many = torch.cuda.CUDAGraph()
    with torch.cuda.graph(many):
        for _ in range(rounds):
            fn()
    many.replay()
    one.replay()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]  # type: ignore[no-untyped-call]
    warm: list[float] = []
    cold: list[float] = []
    for _ in range(reps):
        ev[0].record()
        many.replay()
        ev[1].record()
        ev[1].synchronize()
        warm.append(ev[0].elapsed_time(ev[1]) / 1e3 / rounds)
        if flush is not None:
            flush.add_(1)  # every line of it written: L2 holds none of the canary's bytes afterwards
        ev[0].record()
        one.replay()
        ev[1].record()
        ev[1].synchronize()
        cold.append(ev[0].elapsed_time(ev[1]) / 1e3)
    return Timed(statistics.median(warm), statistics.median(cold), nodes, graph_nodes(one) if kept else None)


def group_bytes(group: str, *, bs: int, ctx: int, budget: VerifyBudget) -> int:
    """Least bytes a group moves in one forward (decode: one token per request; ``kept`` entries verified)."""
    live = bs * (ctx - 1)
    kept = min(live, budget.entries_bound(bs))
    return {
        "staging": 2 * 8 * 6 * bs,  # six int64 arrays of bs, read and written
        "plan": live * (4 * 8 + 4),  # 4 int64 words per live entry written, its req_to_token entry read
        "verify_budget": kept * 4 * 8 * 2 + 8 + 8 + 4,  # the kept entries' words; the overflow count
        "verify": 4 * kept * (2 * 32 + 4 * 8) + 2 * kept * 16,  # slot + predecessor record, plan words; real KV
        "write": 4 * bs * (32 + 32),  # one record written, its predecessor read
    }[group]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--bs", type=int, default=None, help="requests (default 64; cpu 4)")
    p.add_argument("--ctx", type=int, default=None, help="context tokens per request (default 2048; cpu 64)")
    p.add_argument("--budget-frac", type=int, default=16, help="the budget verifies live entries / this per step")
    p.add_argument("--rounds", type=int, default=20, help="rounds per warm replay (default 20)")
    p.add_argument("--reps", type=int, default=None, help="timed replays per variant (default 30; cpu 3)")
    p.add_argument("--flush-mib", type=int, default=256, help="L2 flush before each cold replay (MiB; 0: none)")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--quick", action="store_true", help="bs 16 x 512 (cpu: 2 x 32), few replays")
    p.add_argument("--out", default=None, help="write the JSON records here")
    args = p.parse_args(argv)
    dev = torch.device(args.device)
    cpu = dev.type == "cpu"
    if cpu:
        torch.set_num_threads(1)
    bs = args.bs or (2 if cpu and args.quick else 4 if cpu else 16 if args.quick else 64)
    ctx = args.ctx or (32 if cpu and args.quick else 64 if cpu else 512 if args.quick else 2048)
    reps = args.reps or (3 if cpu else 10 if args.quick else 30)
    if bs < 1 or ctx < 2 or args.budget_frac < 1 or args.rounds < 1 or reps < 1 or args.flush_mib < 0:
        raise SystemExit("budget_nodes: --bs >= 1, --ctx >= 2, --budget-frac >= 1, --rounds >= 1, --reps >= 1 "
                         "and --flush-mib >= 0 are required")
    shape = SMOKE if cpu else LLAMA_8B
    r = Report(BENCH, machine(dev))
    live = bs * (ctx - 1)
    budget = VerifyBudget(max_entries=max(1, live // args.budget_frac))
    tag = f"bs={bs} ctx={ctx}"
    print(f"{BENCH} on {r.machine}: {tag} ({live} live entries, budget 1/{args.budget_frac}: "
          f"{min(live, budget.entries_bound(bs))} verified per launch)")
    bw = floors.copy_bandwidth(dev, 1 << (24 if cpu else 31))
    r.floor("copy bandwidth (B/s, read + written)", bw, "a device copy")
    node_s = 0.0
    if not cpu and floors.TRITON:
        node_s = floors.empty_launch_graph()
        r.floor("empty kernel in a replayed graph (s)", node_s, "one dependent node's latency")
    pool = Pool(shape, bs=bs, ctx=ctx, buffers=1, device=dev)
    m, batch = attach_canary(pool, budget=budget, backend=args.backend, chunk=min(ctx, 512), graphs=False)
    runner: ForwardRunner = m._forwards[0]
    if m.branch is not None:
        m.branch.enabled = True  # the ``all`` row forks (off by default in a manager); ``all, sequential`` does not
    nodes = forward_nodes(runner, batch)
    flush = torch.zeros(args.flush_mib << 18, dtype=torch.int32, device=dev) if args.flush_mib and not cpu else None

    def manager_forward(m: CanaryManager = m, batch: CanaryBatch = batch) -> None:
        m.prepare(batch)  # host only (no token check, no owners): what the manager asks before every head()
        m.head(batch)
        m.tail()

    def manager_sequential(runner: ForwardRunner = runner) -> None:
        branch, runner.branch = runner.branch, None  # K's launches then V's, under capture too
        try:
            manager_forward()
        finally:
            runner.branch = branch

    variants: dict[str, tuple[Fn, list[str]]] = {"all": (manager_forward, list(GROUPS)),
                                                  "all, sequential": (manager_sequential, list(GROUPS)),
                                                  "all, in turn": (run_all([n.fn for n in nodes]), list(GROUPS))}
    for g in GROUPS:
        variants[f"without {g}"] = (run_all([n.fn for n in nodes if n.group != g]), [x for x in GROUPS if x != g])
        variants[f"{g} alone"] = (run_all([n.fn for n in nodes if n.group == g]), [g])
    variants["V on a second branch"] = (v_branch(nodes, dev), list(GROUPS))  # composed: what ``all`` does
    # what-if: K and V as one launch each (the V launches left out: a lower bound, their bytes left out too)
    variants["what if: K only"] = (run_all([n.fn for n in nodes if n.half != "v"]), list(GROUPS))
    results: dict[str, Timed] = {}
    for name, (fn, groups) in variants.items():
        t = time_variant(fn, dev, rounds=args.rounds, reps=reps, flush=flush)
        results[name] = t
        nbytes = sum(group_bytes(g, bs=bs, ctx=ctx, budget=budget) for g in groups)
        fl = max(nbytes / bw, t.nodes * node_s)
        gn = "" if t.graph_nodes is None else f", {t.graph_nodes} graph nodes"
        why = f"{t.nodes} launches{gn}; floor max({nbytes / 1e3:.1f} kB at copy bw, nodes x {node_s * 1e6:.2f} us)"
        if cpu:
            r.add(f"HEAD + TAIL eager, {name} {tag}", t.warm, fl, note=why)
            continue
        r.add(f"HEAD + TAIL graph, {name}, warm L2 {tag}", t.warm, fl, note=why)
        r.add(f"HEAD + TAIL graph, {name}, cold L2 {tag}", t.cold, fl, note="L2 flushed before each replay")
    allt = results["all"]
    r.note(f"  all: {allt.nodes} launches; per group: " + ", ".join(
        f"{g} {results[f'{g} alone'].nodes}" for g in GROUPS))
    seq = results["all, sequential"]  # the groups' variants launch in turn: compared with the sequential graph
    for g in GROUPS:  # what removing the group saves, beside what it costs alone
        alone, without = results[f"{g} alone"], results[f"without {g}"]
        if cpu:
            r.note(f"  {g:<14} alone {alone.warm * 1e6:9.2f} us; removing it saves "
                   f"{(seq.warm - without.warm) * 1e6:9.2f} us (eager)")
            continue
        r.note(f"  {g:<14} alone warm {alone.warm * 1e6:7.2f} us cold {alone.cold * 1e6:7.2f} us; removing it "
               f"saves warm {(seq.warm - without.warm) * 1e6:7.2f} us cold {(seq.cold - without.cold) * 1e6:7.2f} us")
    m.end_step()
    m.flush()
    r.write(args.out)
    for mine, composed in (("all, sequential", "all, in turn"), ("all", "V on a second branch")):
        got, comp = results[mine], results[composed]
        if (got.nodes, got.graph_nodes) != (comp.nodes, comp.graph_nodes):
            print(f"{BENCH}: {composed!r} launches {comp.nodes} ({comp.graph_nodes} graph nodes), {mine!r} "
                  f"{got.nodes} ({got.graph_nodes}): the groups above are not the manager's forward")
            return 1
    branch = m.branch
    if not cpu and (branch is None or branch.forks == 0):
        print(f"{BENCH}: the manager's capture forked no phase: 'all' is its sequential graph")
        return 1
    if m.total_violations:
        print(f"{BENCH}: {m.total_violations} violations on a clean pool (first: "
              f"{m.events[0].message.splitlines()[0]}): the figures above are not of a clean run")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

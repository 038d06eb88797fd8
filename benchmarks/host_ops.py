"""What the transformers integration's per-step host phases cost, counted rather than timed (a CPU proxy).

On a GPU each dispatched torch op costs the host a few microseconds whatever the kernel does, and each
device-to-host read stalls; on this machine's CPU neither shows in a timing as it would there. So this runs
``bench_transformers``' workload shape (bs 32, decode-heavy, real-KV PARTIAL over K and V, sweep every 4 steps)
with tiny tensors, so kernels cost next to nothing, and counts per step for each phase of the wrapped step
(``map`` = reading the engine's request states, where the session has a method for it, + ``PoolState.batch``;
``head`` = prepare + head; ``tail``; ``end_step``):

- ``ops``: aten ops dispatched outside kernels (a ``TorchDispatchMode`` counter: what a CUDA host would
  launch or set up);
- ``launches``: kvcanary kernel launches (the backend's call, counted once: its body is device work there);
- ``allocs``: of those, ops that return a fresh tensor (no output aliases an input): allocator calls;
- ``host_reads``: ``aten::_local_scalar_dense`` (``.item()``, ``int(t)``) and ``Tensor.tolist`` calls on
  tensors of any device (on a GPU, a read of a device tensor is a sync);
- ``py_calls``: Python function calls (cProfile's call count, C calls included; the counter's own dispatch
  machinery adds about 11 per counted op);
- ``med_ops`` / ``med_calls``: ``ops`` and ``py_calls`` of the median step (a quiet decode step: no request
  joined, left or crossed a block boundary), where the other columns average every step; ``med_own``: the
  median step's Python calls less the counter's and the phase wrapper's own (the measured code's calls);
- ``us``: host microseconds of the phase in a step of uninstrumented runs, the median over every step of
  ``--rounds`` runs (a median, not a mean: this machine's other work lands in some steps, not in most), less
  the kernels' bodies (device work on a GPU) and, with ``--graphs``, less a replayed bucket's launches.

The floor of ``ops`` is 1 for ``end_step`` (one read-back copy) and 1 for ``map`` (one staging copy).

``--graphs`` proxies what a GPU runs by default, the manager's own CUDA graphs (``CanaryConfig.graphs``): each
forward is padded to its bucket and staged by one ``torch.cat``, and a bucket's later uses replay its graph.
Here a replay runs the bucket's launches with the counters off and counts one launch (a GPU's
``CUDAGraph.replay``). A ``torch.cat`` whose parts do not all have the output's dtype is, on CUDA, one copy per
part (``narrow`` + ``copy_``) instead of one kernel: the counter counts it so (``cat_mixed_dtype``, two ops a
part, one launch a part), since this machine's CPU kernel hides it.

Usage (repository root)::

    python benchmarks/host_ops.py [--bs 32] [--new-tokens 24] [--graphs] [--window 64] [--out results.json]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import json
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kvcanary.integrations.transformers import attach_canaries
from kvcanary.integrations.transformers.pool import PoolState
from kvcanary.integrations.transformers.session import TransformersCanary
from kvcanary.integrations.transformers.workload import cb_config, tiny_hybrid, tiny_llama
from kvcanary.manager import CanaryManager
from kvcanary.manager.graphs import Bucket, ForwardGraphs
from kvcanary.registry import REGISTRY

PHASES = ("map", "head", "tail", "end_step")
FLOORS = {"map": 1, "head": None, "tail": None, "end_step": 1}


class _Counter(TorchDispatchMode):
    """Counts every aten op (and the fresh-tensor ones) into the phase that is current."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.phase: str | None = None
        self.ops: Counter[str] = Counter()
        self.allocs: Counter[str] = Counter()
        self.reads: Counter[str] = Counter()
        self.names: dict[str, Counter[str]] = {p: Counter() for p in PHASES}

        self.launches: Counter[str] = Counter()
        self.in_kernel = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        p = self.phase
        if p is not None and not self.in_kernel:
            self.ops[p] += 1
            name = str(func.overloadpacket.__name__)
            self.names[p][name] += 1
            if name == "_local_scalar_dense":
                self.reads[p] += 1
            if name == "cat" and isinstance(out, torch.Tensor):
                parts = [t for t in args[0] if t.numel()]
                if any(t.dtype != out.dtype for t in parts):  # CUDA: a narrow + copy_ launch per part
                    self.ops[p] += 2 * len(parts) - 1
                    self.launches[p] += len(parts)
                    self.names[p]["cat_mixed_dtype"] += len(parts)
            rets = func._schema.returns
            if rets and all(r.alias_info is None for r in rets) and any(
                    isinstance(o, torch.Tensor) for o in (out if isinstance(out, (tuple, list)) else (out,))):
                self.allocs[p] += 1
        return out


class _Replays(ForwardGraphs):
    """The proxy of the manager's graphs: a bucket's first use runs its padded launches (counted); later uses
    run them uncounted, as one launch (a GPU's replay of the captured graph)."""

    counter: ClassVar[_Counter | None] = None
    profs: ClassVar[dict[str, cProfile.Profile]] = {}

    def __init__(self, *, rows_capacity: int, tokens_capacity: int) -> None:
        super().__init__(rows_capacity=rows_capacity, tokens_capacity=tokens_capacity, capture=False, strict=True)
        self._seen: set[tuple[str, Bucket]] = set()

    def drop(self, phase: str) -> None:
        super().drop(phase)
        self._seen = {k for k in self._seen if k[0] != phase}  # the phase's next use is a first use again

    def run(self, phase: str, bucket: Bucket, launches: Any) -> None:
        c = _Replays.counter
        if (phase, bucket) not in self._seen:
            self._seen.add((phase, bucket))
            launches()
            return
        self.replays += 1
        if c is None or c.phase is None or c.in_kernel:  # the timed runs: a replay's launches are off the clock
            t0 = time.perf_counter()
            _Excluded.depth += 1
            try:
                launches()
            finally:
                _Excluded.depth -= 1
                _Excluded.seconds += time.perf_counter() - t0
            return
        c.launches[c.phase] += 1
        c.names[c.phase]["graph_replay"] += 1
        prof = _Replays.profs.get(c.phase)
        c.in_kernel = True
        if prof is not None:
            prof.disable()
        try:
            launches()
        finally:
            c.in_kernel = False
            if prof is not None:
                prof.enable()


def _use_replays() -> Any:
    """Give each new cache's manager the replay proxy, for its forwards and its sweep (PoolState builds the
    manager at a cache's first step)."""
    init = PoolState.__init__

    def with_replays(self: PoolState, *a: Any, **k: Any) -> None:
        init(self, *a, **k)
        caps = self.manager.capacities
        for runner in self.manager._forwards:
            runner.graphs = _Replays(rows_capacity=caps.write_req_capacity, tokens_capacity=caps.write_token_capacity)
        if self.manager._sweep.enabled:  # the sweep's one graph (its verify launches)
            self.manager._sweep.graphs = _Replays(rows_capacity=1, tokens_capacity=1)

    PoolState.__init__ = with_replays  # type: ignore[method-assign]
    return init


class _Probe:
    """Wraps the phases' entry points so the counter and one cProfile per phase know which phase runs."""

    def __init__(self, counter: _Counter | None) -> None:
        self.counter = counter
        self.prof = {p: cProfile.Profile() for p in PHASES}
        self._saved: list[tuple[Any, str, Any]] = []
        self.tolist: Counter[str] = Counter()
        self.per_step: dict[str, list[tuple[int, int, int]]] = {p: [] for p in PHASES}
        """Per phase, each step's (ops, Python calls, own Python calls): the median step is a quiet decode
        step."""

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        c = self.counter
        if c is None or c.phase is not None:  # nested (prepare inside head's window): the outer phase keeps it
            yield
            return
        c.phase = name
        self.prof[name].enable()
        try:
            with c:  # a dispatch mode is per thread: the engine steps on its own thread
                yield
        finally:
            self.prof[name].disable()
            c.phase = None

    def wrap(self, owner: Any, attr: str, name: str) -> None:
        fn = getattr(owner, attr)
        probe = self

        def wrapped(*a: Any, **k: Any) -> Any:
            with probe.phase(name):
                return fn(*a, **k)

        self._saved.append((owner, attr, fn))
        setattr(owner, attr, wrapped)

    def install(self) -> None:
        if hasattr(TransformersCanary, "_requests"):
            self.wrap(TransformersCanary, "_requests", "map")
        for key, (choices, declined) in list(REGISTRY._cache.items()):  # every backend chosen by the warm-up
            REGISTRY._cache[key] = ([dataclasses.replace(c, impl=self._kernel(c.impl)) for c in choices], declined)
        self.wrap(PoolState, "batch", "map")
        self.wrap(CanaryManager, "prepare", "head")
        self.wrap(CanaryManager, "head", "head")
        self.wrap(CanaryManager, "tail", "tail")
        self.wrap(TransformersCanary, "_collect", "end_step")
        self.wrap(CanaryManager, "end_step", "end_step")
        self._per_step()
        orig = torch.Tensor.tolist
        probe = self

        def tolist(t: torch.Tensor) -> Any:
            c = probe.counter
            if c is not None and c.phase is not None and not c.in_kernel:
                c.reads[c.phase] += 1
            return orig(t)

        self._saved.append((torch.Tensor, "tolist", orig))
        torch.Tensor.tolist = tolist  # type: ignore[method-assign,assignment]

    def _per_step(self) -> None:
        """Record each phase's ops and Python calls of every wrapped step (after it, out of every phase)."""
        step = TransformersCanary._step
        probe = self

        def counted(*a: Any, **k: Any) -> Any:
            c = probe.counter
            assert c is not None
            ops0 = {p: c.ops[p] for p in PHASES}
            calls0 = {p: (probe.calls(p), probe.own_calls(p)) for p in PHASES}
            try:
                return step(*a, **k)
            finally:
                for p in PHASES:
                    probe.per_step[p].append((c.ops[p] - ops0[p], probe.calls(p) - calls0[p][0],
                                              probe.own_calls(p) - calls0[p][1]))

        self._saved.append((TransformersCanary, "_step", step))
        TransformersCanary._step = counted  # type: ignore[method-assign]

    def _kernel(self, impl: Any) -> Any:
        """One launch per kernel call; the reference backend's own torch ops are the kernel's body, which
        a GPU backend runs on the device, so they are not counted."""
        c = self.counter
        assert c is not None

        def launch(call: Any) -> None:
            if c.phase is not None and not c.in_kernel:
                c.launches[c.phase] += 1
            was, c.in_kernel = c.in_kernel, True
            prof = self.prof[c.phase] if c.phase is not None and not was else None
            if prof is not None:
                prof.disable()
            try:
                impl(call)
            finally:
                c.in_kernel = was
                if prof is not None:
                    prof.enable()

        return launch

    def uninstall(self) -> None:
        REGISTRY.invalidate()
        for owner, attr, fn in reversed(self._saved):
            setattr(owner, attr, fn)
        self._saved.clear()

    def calls(self, name: str) -> int:
        prof = self.prof[name]
        prof.create_stats()
        return sum(int(v[1]) for v in prof.stats.values())

    def own_calls(self, name: str) -> int:
        """:meth:`calls` less the counter's and the phase wrapper's own: calls of their frames, and calls of
        built-ins made from their frames."""
        prof = self.prof[name]
        prof.create_stats()
        n = 0
        for func, (_, nc, _, _, callers) in prof.stats.items():
            if _instrument(func):
                continue
            n += int(nc)
            if func[0] == "~":
                n -= sum(int(c[0]) for caller, c in callers.items() if _instrument(caller))
        return n


_INSTRUMENT = ("host_ops.py", "torch/_dynamo/", "torch/_ops.py", "torch/utils/_python_dispatch.py",
               "torch/_library/", "torch/compiler/", "torch/_compile.py", "contextlib.py")


def _instrument(func: tuple[str, int, str]) -> bool:
    """Whether a cProfile entry is the counter's or the phase wrapper's (not the measured code's)."""
    file, _, fn = func
    if file == "~":
        return "_dynamo" in fn or "dispatch_stack" in fn or "_lsprof" in fn or "torch._ops" in fn
    return any(part in file for part in _INSTRUMENT)


class _Excluded:
    """Host seconds kept off the phases' clock: the kernels' bodies (device work on a GPU) and, with
    ``--graphs``, a replayed bucket's launches (one ``CUDAGraph.replay`` on a GPU)."""

    seconds = 0.0
    depth = 0


class _Clock:
    """Each phase's host seconds per step (the phase's entry points timed; a step's parts summed), less what
    :class:`_Excluded` keeps off the clock."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {p: [] for p in PHASES}
        self._open: dict[str, float] = {}
        self._saved: list[tuple[Any, str, Any]] = []
        self._chosen: dict[Any, Any] = {}

    def _wrap(self, owner: Any, attr: str, name: str, *, first: bool, last: bool, late: bool = False) -> None:
        """``late``: a part that may or may not follow the phase's last one in a step (the session's report
        collection, called only when the step reported something): added to the step's figure already out."""
        fn = getattr(owner, attr)
        acc = self._open
        out = self.seconds[name]

        def timed(*a: Any, **k: Any) -> Any:
            t0, x0 = time.perf_counter(), _Excluded.seconds
            try:
                return fn(*a, **k)
            finally:
                dt = time.perf_counter() - t0 - (_Excluded.seconds - x0)
                if late and out:
                    out[-1] += dt
                else:
                    acc[name] = (0.0 if first else acc.get(name, 0.0)) + dt
                    if last:
                        out.append(acc.pop(name))

        self._saved.append((owner, attr, fn))
        setattr(owner, attr, timed)

    def install(self) -> None:
        self._chosen = dict(REGISTRY._cache)  # every backend chosen by the warm-up, put back as it was
        for key, (choices, declined) in self._chosen.items():
            REGISTRY._cache[key] = ([dataclasses.replace(c, impl=self._kernel(c.impl)) for c in choices], declined)
        if hasattr(TransformersCanary, "_requests"):  # the engine's request states read (a step's map starts)
            self._wrap(TransformersCanary, "_requests", "map", first=True, last=False)
        self._wrap(PoolState, "batch", "map", first=not hasattr(TransformersCanary, "_requests"), last=True)
        self._wrap(CanaryManager, "prepare", "head", first=True, last=False)
        self._wrap(CanaryManager, "head", "head", first=False, last=True)
        self._wrap(CanaryManager, "tail", "tail", first=True, last=True)
        self._wrap(CanaryManager, "end_step", "end_step", first=True, last=True)
        self._wrap(TransformersCanary, "_collect", "end_step", first=False, last=True, late=True)

    @staticmethod
    def _kernel(impl: Any) -> Any:
        """The kernel's body off the clock (a launcher's own host work stays on it)."""

        def body(call: Any) -> None:
            if _Excluded.depth:
                impl(call)
                return
            t0 = time.perf_counter()
            _Excluded.depth += 1
            try:
                impl(call)
            finally:
                _Excluded.depth -= 1
                _Excluded.seconds += time.perf_counter() - t0

        return body

    def uninstall(self) -> None:
        REGISTRY._cache.update(self._chosen)
        for owner, attr, fn in reversed(self._saved):
            setattr(owner, attr, fn)
        self._saved.clear()


def _run(model: Any, prompts: list[list[int]], args: argparse.Namespace,
) -> TransformersCanary:
    import transformers

    gen: Any = transformers.GenerationConfig
    gc = gen(max_new_tokens=args.new_tokens, do_sample=False, eos_token_id=-1, pad_token_id=0)
    pages = (args.prompt_len + args.new_tokens + args.page - 1) // args.page
    cb = cb_config(page=args.page, num_blocks=args.bs * pages + 8, max_batch_tokens=args.batch_tokens,
                   max_requests=args.bs)
    session = attach_canaries(model, real_kv="partial", backend="torch_ref")
    with session:
        out = model.generate_batch(prompts, generation_config=gc, continuous_batching_config=cb, progress_bar=False)
    bad = [rid for rid, o in out.items() if o.error or len(o.generated_tokens) != args.new_tokens]
    if bad or session.reports:
        raise RuntimeError(f"the clean run failed: {bad[:4]} {[r.event.message for r in session.reports[:2]]}")
    return session


def workload_args(p: argparse.ArgumentParser) -> None:
    """The workload's shape options (this script's and ``host_calls.py``'s)."""
    p.add_argument("--bs", type=int, default=32)
    p.add_argument("--prompt-len", type=int, default=24)
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--page", type=int, default=16)
    p.add_argument("--batch-tokens", type=int, default=1024)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    workload_args(p)
    p.add_argument("--rounds", type=int, default=5, help="uninstrumented runs timed")
    p.add_argument("--names", action="store_true", help="also print the ops of each phase by name")
    p.add_argument("--graphs", action="store_true", help="proxy the manager's CUDA graphs (a GPU's default)")
    p.add_argument("--window", type=int, default=0,
                   help="a model with a sliding-window layer of this many tokens beside a full one (0: none)")
    p.add_argument("--out", default=None, help="write the figures as JSON")
    args = p.parse_args()
    torch.set_num_threads(1)
    model = tiny_hybrid(seed=0, window=args.window, hidden=32, heads=2, kv_heads=2, vocab=64) if args.window \
        else tiny_llama(seed=0, layers=1, hidden=32, heads=2, kv_heads=2, vocab=64)
    rng = random.Random(0)
    prompts = [[rng.randrange(1, 64) for _ in range(args.prompt_len)] for _ in range(args.bs)]
    if args.graphs:
        _use_replays()
    _run(model, prompts, args)  # warm-up
    clock = _Clock()
    clock.install()
    try:
        for _ in range(args.rounds):
            _run(model, prompts, args)
    finally:
        clock.uninstall()
    counter = _Counter()
    _Replays.counter = counter
    probe = _Probe(counter)
    _Replays.profs = probe.prof
    probe.install()
    try:
        counted = _run(model, prompts, args)
    finally:
        probe.uninstall()
    steps = max(1, counted.steps)
    rows: dict[str, dict[str, float]] = {}
    print(f"host_ops bs={args.bs} ctx={args.prompt_len}+{args.new_tokens} page={args.page} steps={steps} "
          f"graphs={'proxy' if args.graphs else 'off'} "
          f"(per step; us: the median step of {args.rounds} uninstrumented runs)")
    print(f"{'phase':10} {'ops':>8} {'floor':>6} {'ratio':>6} {'launches':>8} {'allocs':>8} {'reads':>7} "
          f"{'py_calls':>9} {'us':>9} {'med_ops':>8} {'med_calls':>9} {'med_own':>8}")
    for ph in PHASES:
        row = {"ops": counter.ops[ph] / steps, "launches": counter.launches[ph] / steps,
               "allocs": counter.allocs[ph] / steps,
               "host_reads": counter.reads[ph] / steps, "py_calls": probe.calls(ph) / steps,
               "us": statistics.median(clock.seconds[ph]) * 1e6 if clock.seconds[ph] else 0.0,
               "median_step_ops": statistics.median(o for o, _, _ in probe.per_step[ph]) if probe.per_step[ph]
               else 0,
               "median_step_py_calls": statistics.median(n for _, n, _ in probe.per_step[ph])
               if probe.per_step[ph] else 0,
               "median_step_own_py_calls": statistics.median(n for _, _, n in probe.per_step[ph])
               if probe.per_step[ph] else 0}
        rows[ph] = row
        floor = FLOORS[ph]
        ratio = f"{row['ops'] / floor:6.1f}" if floor else f"{'-':>6}"
        print(f"{ph:10} {row['ops']:8.2f} {floor or '-':>6} {ratio} {row['launches']:8.2f} {row['allocs']:8.2f} "
              f"{row['host_reads']:7.2f} {row['py_calls']:9.1f} {row['us']:9.1f} {row['median_step_ops']:8.1f} "
              f"{row['median_step_py_calls']:9.1f} {row['median_step_own_py_calls']:8.1f}")
        if args.names:
            print("    " + ", ".join(f"{n} {c / steps:.2f}" for n, c in counter.names[ph].most_common()))
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "steps": steps, "phases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

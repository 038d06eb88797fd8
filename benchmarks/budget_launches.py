"""What one decode forward launches with full verification and with a verify budget, counted (any device).

bench_fast_step's canary (one FULL group, K and V, real-KV PARTIAL, a decode of every request after a chunked
prefill) at a smaller shape, eager (no CUDA graph: every launch is seen). Per variant and phase (``head`` =
HEAD, ``tail`` = TAIL) it counts:

- ``kernels``: kvcanary kernel launches (an operation's call, counted once: a GPU backend runs its body on
  the device), by operation;
- ``ops``: aten ops the manager dispatches outside those kernels (a ``TorchDispatchMode`` counter), each a
  launch on a GPU (views and other metadata-only ops included: a GPU launches nothing for them, so this
  is an upper bound);
- ``elems``: the elements those ops write (each output tensor's ``numel``): the work done outside kernels,
  which is proportional to the live entries when it walks the full plan, to the budget when it walks the
  budget's.

The device time of the same forwards is bench_fast_step's (``canary device time``); this counts what makes
it up. Usage (repository root)::

    python benchmarks/budget_launches.py [--device cpu] [--bs 64] [--ctx 256] [--budget-frac 16] [--backend B]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.bench_engine import chunked_prefill, token_batch
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
from kvcanary.registry import REGISTRY

PHASES = ("head", "tail")
# metadata-only aten ops: no device work, nothing launched
_VIEWS = frozenset({"view", "_unsafe_view", "slice", "select", "as_strided", "expand", "alias", "unsqueeze",
                    "squeeze", "reshape", "t", "permute", "detach", "lift_fresh", "empty", "_to_copy_noop"})


@dataclasses.dataclass
class Counts:
    """One phase's counts (see the module docstring)."""

    kernels: Counter[str] = dataclasses.field(default_factory=Counter)
    ops: Counter[str] = dataclasses.field(default_factory=Counter)
    elems: int = 0

    def launches(self) -> int:
        """Kernels plus the ops that do device work (views left out)."""
        return sum(self.kernels.values()) + sum(n for name, n in self.ops.items() if name not in _VIEWS)


class _OpCounter(TorchDispatchMode):
    """Counts aten ops outside kvcanary kernels into the current phase."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.counts: Counts | None = None
        self.in_kernel = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        c = self.counts
        if c is not None and not self.in_kernel:
            name = str(func.overloadpacket.__name__)
            c.ops[name] += 1
            if name not in _VIEWS:
                outs = out if isinstance(out, (tuple, list)) else (out,)
                c.elems += sum(o.numel() for o in outs if isinstance(o, torch.Tensor))
        return out


def _wrap_kernels(counter: _OpCounter) -> Callable[[], None]:
    """Count every cached kernel choice's calls (run one forward first, so the choices are cached); returns
    the undo."""
    saved = dict(REGISTRY._cache)

    def wrap(op: Any, impl: Any) -> Any:
        def launch(call: Any) -> None:
            c = counter.counts
            if c is not None and not counter.in_kernel:
                c.kernels[str(op.value if hasattr(op, "value") else op)] += 1
            was, counter.in_kernel = counter.in_kernel, True
            try:
                impl(call)
            finally:
                counter.in_kernel = was
        return launch

    for key, (choices, declined) in list(REGISTRY._cache.items()):
        REGISTRY._cache[key] = ([dataclasses.replace(ch, impl=wrap(key[0], ch.impl)) for ch in choices], declined)

    def undo() -> None:
        REGISTRY._cache.clear()
        REGISTRY._cache.update(saved)

    return undo


def build(*, bs: int, ctx: int, budget: VerifyBudget | None, backend: str | None, device: torch.device
          ) -> tuple[CanaryManager, CanaryBatch]:
    """bench_fast_step's manager (its own graphs off, so every launch runs and is counted) over a pool of ``bs``
    requests of ``ctx`` tokens, prefilled, and the decode batch."""
    n = bs * ctx + 1
    k = torch.randn(n, 2, 64, device=device, dtype=torch.bfloat16)
    v = torch.randn(n, 2, 64, device=device, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(0)
    slots = (torch.randperm(n - 1, generator=g) + 1).view(bs, ctx)
    r2t = torch.zeros(bs + 1, ctx + 1, dtype=torch.int32, device=device)
    r2t[1:, :ctx] = slots.to(torch.int32).to(device)
    tokens = torch.randint(0, 1000, (bs, ctx), generator=g).to(device)
    rows = torch.arange(1, bs + 1, dtype=torch.int64, device=device)
    chunk = min(ctx, 512)
    caps = CanaryCapacities(verify_capacity=bs * ctx, write_req_capacity=bs, write_token_capacity=bs * chunk,
                            sweep_capacity=n)
    spec = KvPoolSpec(groups=(PoolGroupSpec(kind=PoolKind.FULL, k_layer0=k, v_layer0=v),), req_to_token=r2t)
    cfg = CanaryConfig(mode=CanaryMode.LOG, real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, backend=backend,
                       verify_budget=budget, graphs=False)
    m = CanaryManager.attach(pool=spec, capacities=caps, config=cfg)
    m.mark_init_finished()
    chunked_prefill(m, rows, r2t, tokens, chunk)
    m.end_step()
    decode = token_batch(rows, r2t, tokens, ctx - 1, 1)
    return m, decode


def count(m: CanaryManager, batch: CanaryBatch) -> dict[str, Counts]:
    """One decode forward (after a warm-up one), counted per phase."""
    m.prepare(batch)
    m.head(batch)
    m.tail()
    m.end_step()
    counter = _OpCounter()
    undo = _wrap_kernels(counter)
    out = {p: Counts() for p in PHASES}
    try:
        m.prepare(batch)
        with counter:
            counter.counts = out["head"]
            m.head(batch)
            counter.counts = out["tail"]
            m.tail()
            counter.counts = None
        m.end_step()
    finally:
        undo()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--bs", type=int, default=64)
    p.add_argument("--ctx", type=int, default=256)
    p.add_argument("--budget-frac", type=int, default=16)
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    args = p.parse_args(argv)
    if args.bs < 1 or args.ctx < 2 or args.budget_frac < 1:
        raise SystemExit("budget_launches: --bs >= 1, --ctx >= 2 and --budget-frac >= 1 are required")
    dev = torch.device(args.device)
    live = args.bs * (args.ctx - 1)
    budget = VerifyBudget(max_entries=max(1, live // args.budget_frac))
    variants: dict[str, VerifyBudget | None] = {"full": None, f"budget 1/{args.budget_frac}": budget}
    print(f"budget_launches on {dev}: bs={args.bs} ctx={args.ctx} ({live} live entries), one decode forward")
    print(f"{'variant':<14} {'phase':<5} {'launches':>8} {'kernels':>7} {'ops':>4} {'elems':>10}  "
          "kernels / ops by name")
    for name, b in variants.items():
        m, batch = build(bs=args.bs, ctx=args.ctx, budget=b, backend=args.backend, device=dev)
        counts = count(m, batch)
        for phase, c in counts.items():
            by = ", ".join(f"{k} {n}" for k, n in sorted(c.kernels.items()))
            ops = ", ".join(f"{k} {n}" for k, n in c.ops.most_common())
            print(f"{name:<14} {phase:<5} {c.launches():>8} {sum(c.kernels.values()):>7} {sum(c.ops.values()):>4} "
                  f"{c.elems:>10}  {by} | {ops}")
        total = sum(c.launches() for c in counts.values())
        print(f"{name:<14} total {total:>8}")
        if m.total_violations:
            print(f"budget_launches: {name}: {m.total_violations} violations on a clean pool")
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

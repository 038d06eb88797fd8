"""Compare a backend's outputs with the reference's: exact tensors, violation rings as multisets.

A parallel backend may append one launch's rows in any order, so ring rows past ``base`` (the write index
before the launch) are compared as a multiset; rows before ``base`` and the final write index must be
exact. When a launch overflows the ring part-way (``order_sensitive``, or the reference's own write index
passing the capacity), which rows were kept depends on the order, so only the index and the untouched
prefix are compared.

Two things torch_ref documents as unspecified for a parallel backend are taken out of write calls before
they are compared (:func:`without_unspecified`): a slot stored twice by one launch, and a seed slot the same
launch stores. :func:`check_call` runs one :class:`~kvcanary.testing.builders.Call` on a backend and on
torch_ref and lists what differs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import torch

from kvcanary.plans import WritePlan
from kvcanary.registry import Op
from kvcanary.testing.builders import Call, Device


def ring_rows(ring: torch.Tensor, start: int, stop: int) -> Counter[tuple[int, ...]]:
    return Counter(tuple(int(v) for v in row) for row in ring[start:stop].cpu().tolist())


def compare_ring(got: torch.Tensor, want: torch.Tensor, base: int, total: int, *, order_sensitive: bool,
                 exact_order: bool) -> list[str]:
    """Differences between two rings after a launch (empty list: they agree)."""
    cap = want.shape[0]
    got, want = got.cpu(), want.cpu()
    kept = min(max(total, 0), cap)
    start = min(max(base, 0), cap)
    order_sensitive = order_sensitive or start < cap < total  # the reference itself overflowed part-way
    problems: list[str] = []
    if not torch.equal(got[:start], want[:start]):
        problems.append("rows before the launch changed")
    if not torch.equal(got[kept:], want[kept:]):
        problems.append("rows past the write index changed")
    if exact_order:
        if not torch.equal(got[start:kept], want[start:kept]):
            problems.append("appended rows differ (exact order)")
    elif not order_sensitive and ring_rows(got, start, kept) != ring_rows(want, start, kept):
        problems.append("appended rows differ (as a multiset)")
    return problems


def compare_outputs(got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor], *, base: int | None = None,
                    order_sensitive: bool = False, exact_order: bool = False) -> list[str]:
    """Differences between two sets of launch outputs; ``violation_ring`` is compared as above."""
    problems: list[str] = []
    for name, w in want.items():
        g = got[name].cpu()
        if name == "violation_ring" and base is not None:
            total = int(want["violation_write_index"].reshape(-1)[0])
            problems += [f"violation_ring: {p}" for p in
                         compare_ring(g, w, base, total, order_sensitive=order_sensitive, exact_order=exact_order)]
            continue
        if g.shape != w.shape or g.dtype != w.dtype:
            problems.append(f"{name}: {tuple(g.shape)}/{g.dtype} vs {tuple(w.shape)}/{w.dtype}")
        elif not torch.equal(g, w.cpu()):
            diff = (g != w.cpu()).reshape(-1).nonzero().reshape(-1)[:5].tolist()
            problems.append(f"{name}: {int((g != w.cpu()).sum())} elements differ, first at flat {diff}")
    return problems


def launcher(op: Op) -> Callable[..., None]:
    """The public launcher of an operation."""
    import kvcanary as kc

    table: dict[Op, Callable[..., None]] = {
        Op.VERIFY: kc.launch_canary_verify_kernel,
        Op.WRITE: kc.launch_canary_write_kernel,
        Op.PLAN: kc.launch_canary_plan_kernels,
        Op.PLAN_OFFSETS: kc.launch_plan_offsets_kernel,
        Op.PLAN_ENTRIES: kc.launch_plan_entries_kernel,
        Op.SCATTER: kc.launch_scatter_req_token_ids_kernel,
    }
    return table[op]


def run_call(call: Call, device: torch.device | str, backend: str) -> dict[str, torch.Tensor]:
    kw = call.make(device)
    launcher(call.op)(**kw, backend=backend)
    return {k: v.detach().cpu().clone() for k, v in call.outputs(kw).items()}


def check_call(call: Call, device: torch.device | str, backend: str, reference: str = "torch_ref") -> list[str]:
    """Run ``call`` on ``backend`` (on ``device``) and on ``reference`` (on the CPU); list differences.

    A write call is first stripped of what the reference leaves unspecified (:func:`without_unspecified`).
    """
    if call.op == Op.WRITE:
        call = without_unspecified(call)
    want = run_call(call, "cpu", reference)
    got = run_call(call, device, backend)
    return compare_outputs(got, want, base=call.ring_base, order_sensitive=call.order_sensitive)



# -- write launches the reference leaves unspecified ----------------------------------------------------------
def _processed(kw: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """``(row, start, end)`` of every request row the write processes (torch_ref's clipping rules)."""
    plan: WritePlan = kw["plan"]
    cap = int(plan.write_seed_slot_indices.shape[0])
    nreq = min(max(int(plan.write_num_valid_reqs[0]), 0), cap)
    offs = plan.write_offsets.tolist()
    ntok = int(kw["input_ids"].shape[0])
    if nreq == 0 or offs[nreq] <= 0:
        return []

    def clip(v: int) -> int:
        return min(max(v, 0), ntok)

    return [(r, clip(offs[r]), clip(offs[r + 1])) for r in range(nreq) if clip(offs[r + 1]) > clip(offs[r])]


def unspecified_parts(kw: Mapping[str, Any]) -> tuple[list[int], list[int]]:
    """Token indices whose store would hit a slot stored twice, and request rows whose seed is stored."""
    num_slots = int(kw["context"].canary_buf.shape[0])
    loc = kw["out_cache_loc"].tolist()
    rows = _processed(kw)
    stores = Counter(loc[i] for _, s, e in rows for i in range(s, e) if 0 <= loc[i] < num_slots)
    twice = {slot for slot, n in stores.items() if n > 1}
    tokens = sorted({i for _, s, e in rows for i in range(s, e) if loc[i] in twice})
    stored = set(stores) - twice
    seeds = kw["plan"].write_seed_slot_indices.tolist()
    seed_rows = [r for r, _, _ in rows if 0 <= seeds[r] < num_slots and seeds[r] in stored]
    return tokens, seed_rows


def without_unspecified(call: Call) -> Call:
    """The write ``call`` with every store into a slot stored twice dropped (``out_cache_loc = -1``) and every
    seed the launch stores made a chain head (-1), so every remaining output is specified; other calls as
    they are."""
    if call.op != Op.WRITE:
        return call
    tokens, seed_rows = unspecified_parts(call.make("cpu"))
    if not tokens and not seed_rows:
        return call

    def make(dev: Device) -> dict[str, Any]:
        kw = call.make(dev)
        if tokens:
            kw["out_cache_loc"][torch.tensor(tokens, device=dev)] = -1
        if seed_rows:
            kw["plan"].write_seed_slot_indices[torch.tensor(seed_rows, device=dev)] = -1
        return kw

    return Call(call.op, make, call.outputs, call.ring_base, call.order_sensitive, call.label + "*")

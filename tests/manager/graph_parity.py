"""Shared by the graph tests (CPU and GPU): a workload of varying batch shapes, every device buffer of a
manager by name, and the comparison of two managers' buffers."""

from __future__ import annotations

from collections.abc import Callable

import torch

from kvcanary.manager import CanaryManager
from kvcanary.manager.graphs import Bucket, ForwardGraphs
from tests.manager.world import Req, World


class PhaseLog(ForwardGraphs):
    """The padded launches run eagerly every time (no capture), each run's phase recorded in :attr:`runs`."""

    def __init__(self, *, rows_capacity: int, tokens_capacity: int) -> None:
        super().__init__(rows_capacity=rows_capacity, tokens_capacity=tokens_capacity, capture=False, strict=True)
        self.runs: list[str] = []

    def run(self, phase: str, bucket: Bucket, launches: Callable[[], None]) -> None:
        self.runs.append(phase)
        super().run(phase, bucket, launches)


def pad_eagerly(mgr: CanaryManager, *, rows_capacity: int | None = None,
                tokens_capacity: int | None = None) -> list[ForwardGraphs]:
    """Give every forward slot of ``mgr`` the bucketed path without capture (its padded launches run eagerly
    every time): what the graphs replay, runnable on any device. Smaller capacities make forwards past the
    largest bucket fall back to the unpadded path."""
    out = []
    for runner in mgr._forwards:
        runner.graphs = ForwardGraphs(rows_capacity=rows_capacity or mgr.capacities.write_req_capacity,
                                      tokens_capacity=tokens_capacity or mgr.capacities.write_token_capacity,
                                      capture=False, strict=True)
        out.append(runner.graphs)
    return out


def workload(w: World, *, flip: bool = True, decodes: int = 6) -> None:
    """Three requests sharing a prefix: prefills of 10 and 3 + 4 tokens, then ``decodes`` (at most 9) decodes at
    batch sizes 1 to 3 (engine padding rows on odd steps), then a two-token extend of all three; a K byte of a
    live shared slot flipped mid-way (``flip``)."""
    if not 4 <= decodes <= 9:
        raise ValueError(f"decodes must be in [4, 9] (the world's slots), got {decodes}")
    a = Req(1, list(range(100, 130)), list(range(1, 11)))
    b = Req(2, [*range(100, 106), *range(300, 320)], [*range(1, 7), 11, 12, 13])
    c = Req(3, list(range(500, 530)), list(range(40, 44)))
    w.forward([(a, 0, 10)])
    w.step()
    w.forward([(b, 6, 3), (c, 0, 4)])
    w.step()
    for n in range(decodes):
        a.slots.append(20 + n)
        b.slots.append(30 + n)
        c.slots.append(50 + n)
        reqs = [(a, 10 + n, 1), (b, 9 + n, 1), (c, 4 + n, 1)][: 1 + n % 3]
        if flip and n == 3:
            w.k[5, 0, 0] += 1.0  # a stray write into a live, shared slot's K bytes
        w.forward(reqs, pad_rows=n % 2)
        w.step()
    d = decodes
    a.slots += [20 + d, 21 + d]
    b.slots += [30 + d, 31 + d]
    c.slots += [50 + d, 51 + d]
    w.forward([(a, 10 + d, 2), (b, 9 + d, 2), (c, 4 + d, 2)])
    w.step()


def device_buffers(mgr: CanaryManager) -> dict[str, torch.Tensor]:
    """Everything the canary keeps on the device, by name: the records of every group and rotation set, the
    ring and its write index, the counters, the expected-token pool, the rotation and budget state."""
    st = mgr.state
    out = dict(mgr.transfer_buffers())
    out.update({"ring": st.log.violation_ring, "write_index": st.log.violation_write_index,
                "kernel_run_counters": st.kernel_run_counters, "slot_run_counters": st.slot_run_counters,
                "skipped_verifies": st.skipped_verifies})
    if st.expected_tokens_pool is not None:
        out["expected_tokens_pool"] = st.expected_tokens_pool
    for gi, rot in enumerate(mgr.rotations):
        if rot is not None:
            out[f"rotation{gi}.counter"] = rot.counter
            for si, s in enumerate(rot.sets):
                out[f"rotation{gi}.set{si}.kernel_run_counter"] = s.context.kernel_run_counter
                out[f"rotation{gi}.set{si}.slot_run_counter"] = s.context.slot_run_counter
    if mgr.owners is not None:
        for kind in (g.kind for g in mgr.groups):
            out[f"owners.{kind.name.lower()}"] = mgr.owners.slot_owner(kind)
    for fi, runner in enumerate(mgr._forwards):
        for gi, flt in enumerate(runner.budgets):
            out[f"forward{fi}.budget{gi}.cursor"] = flt.cursor
    return {k: v.detach().cpu().clone() for k, v in out.items()}


def differences(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor], *,
                ring_as_multiset: bool = False) -> list[str]:
    """The names whose bytes differ. ``ring_as_multiset``: the ring's rows below the write index compared as
    a multiset (GPU kernels append rows in no fixed order)."""
    bad = [k for k in sorted(set(got) | set(want)) if k not in got or k not in want]
    for k in sorted(set(got) & set(want)):
        a, b = got[k], want[k]
        if k == "ring" and ring_as_multiset:
            n = int(want["write_index"].reshape(-1)[0])
            n = min(n, int(a.shape[0]))
            a, b = _sorted_rows(a[:n]), _sorted_rows(b[:n])
        if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
            bad.append(k)
    return bad


def _sorted_rows(rows: torch.Tensor) -> torch.Tensor:
    flat = rows.reshape(rows.shape[0], -1)
    order = sorted(range(flat.shape[0]), key=lambda i: flat[i].tolist())
    return flat[order] if order else flat

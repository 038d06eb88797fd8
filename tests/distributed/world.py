"""Shared by the distributed tests: per-rank toy worlds and the scenario functions spawned ranks run.

Every function here is module-level (``torch.multiprocessing`` spawn pickles it by name) and returns small
picklable summaries: (tag name, slot, reason bits) per violation.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from kvcanary.distributed import (
    TensorParallelCanary,
    TransferMessage,
    TransferVerifier,
    Wire,
    accept_transfer,
    make_message,
)
from kvcanary.manager import CanaryManager
from tests.manager.world import Req, World, make_world

Event = tuple[str, int, int]


@dataclass
class RankWorld(World):
    """A world whose "model" writes rank-specific K/V bytes (each TP rank holds its own heads)."""

    rank: int = 0

    def write_kv(self, loc: list[int]) -> None:
        super().write_kv(loc)
        for s in loc:
            if 0 < s < self.k.shape[0]:
                self.k[s] += self.rank
                self.v[s] -= self.rank


def rank_world(rank: int, device: str = "cpu") -> RankWorld:
    w = make_world(device=device)
    return RankWorld(w.manager, w.k, w.v, w.r2t, w.lut, w.swa_k, w.offset, rank=rank)


def events(mgr: CanaryManager) -> list[Event]:
    mgr.flush()
    return [(e.violation.tag_name, e.violation.slot_idx, e.violation.fail_reason_bits) for e in mgr.events]


# -- tensor parallel ----------------------------------------------------------------------------------------
def _tp_once(rank: int, seed: int, bad_rank: int | None, bad_step: int, device: str) -> dict[str, object]:
    """Every rank runs the same two requests for 8 steps; ``bad_rank`` stamps a wrong token at
    ``bad_step``. Returns this rank's view: divergences seen, the gathered report."""
    rng = random.Random(seed)
    w = rank_world(rank, device)
    tp = TensorParallelCanary(w.manager)
    a = Req(row=1, tokens=[rng.randrange(1000) for _ in range(20)], slots=list(range(2, 8)))
    b = Req(row=2, tokens=[rng.randrange(1000) for _ in range(20)], slots=list(range(20, 26)))
    w.forward([(a, 0, 6), (b, 0, 6)])
    tp.end_step()
    nxt = 30
    for step in range(1, 8):
        a.slots.append(nxt)
        b.slots.append(nxt + 1)
        nxt += 2
        override = None
        if rank == bad_rank and step == bad_step:
            override = {a.row: [t + 1 for t in a.tokens]}
        w.forward([(a, len(a.slots) - 1, 1), (b, len(b.slots) - 1, 1)], tokens_override=override)
        tp.end_step()
    report = tp.flush()
    return {"divergences": [(d.step, d.ranks, d.reference) for d in report.divergences],
            "alerts": tp.exchange.violation_alerts,
            "diverging": report.diverging_ranks, "with_violations": report.ranks_with_violations,
            "lines": report.lines(), "clean": report.clean, "compared": tp.exchange.compared_steps}


def tp_run(rank: int, world_size: int, seed: int, runs: list[tuple[int | None, int]],
           device: str = "cpu") -> list[dict[str, object]]:
    """One group, several runs (fresh pools each): ``(bad_rank, bad_step)`` per run (None: clean)."""
    return [_tp_once(rank, seed + i, bad, step, device) for i, (bad, step) in enumerate(runs)]


# -- prefill -> decode transfer -------------------------------------------------------------------------
CASES = ("clean", "flip_kv", "flip_record", "wrong_slots", "partial", "stale")


def _sender_messages(seed: int, device: str) -> tuple[list[int], dict[str, TransferMessage]]:
    """The prefill side: one request prefilled at slots 5..17; each case's message (faults on the wire)."""
    rng = random.Random(seed)
    w = make_world(device=device)
    old = Req(row=1, tokens=[rng.randrange(1000) for _ in range(12)], slots=list(range(5, 17)))
    w.forward([(old, 0, 12)])
    stale = make_message(w.manager, [w.k, w.v], old.slots)  # what the slots held before reuse
    req = Req(row=2, tokens=[rng.randrange(1000) for _ in range(12)], slots=list(range(5, 17)))
    w.forward([(req, 0, 12)])  # the slots are reused for the request that is transferred
    out: dict[str, TransferMessage] = {}
    for case in CASES:
        m = make_message(w.manager, [w.k, w.v], req.slots)
        kv, rec = m.kv.clone(), m.records.clone()
        if case == "flip_kv":
            kv[7, 3] ^= 0x40
        elif case == "flip_record":
            rec[1, 4, 8] ^= 0x01  # k_tail record of transfer index 4: its position field
        elif case == "wrong_slots":
            kv = torch.cat([kv[4:8], kv[0:4], kv[8:]])  # pages of 4 slots: the first two swapped
            rec = torch.cat([rec[:, 4:8], rec[:, 0:4], rec[:, 8:]], dim=1)
        elif case == "partial":
            kv, rec = kv[:9], rec[:, :9]
        elif case == "stale":
            kv[8:12], rec[:, 8:12] = stale.kv[8:12], stale.records[:, 8:12]
        out[case] = TransferMessage(kv, rec)
    return req.tokens, out


def pd_run(rank: int, world_size: int, seed: int, backend: str, device: str) -> dict[str, list[Event]]:
    """Rank 0 prefills and sends every case's message; rank 1 receives each into a fresh pool at other
    slot numbers, verifies the range, then decodes one token over it. Returns rank 1's events per case."""
    wire = Wire(backend=backend, device=torch.device(device))
    if rank == 0:
        toks, msgs = _sender_messages(seed, device)
        dist.send(torch.tensor(toks, dtype=torch.int64, device=wire.wire_device), 1)
        for case in CASES:
            wire.send(msgs[case], 1)
        return {}
    tokens_t = torch.zeros(12, dtype=torch.int64, device=wire.wire_device)
    dist.recv(tokens_t, 0)
    tokens = tokens_t.tolist()
    out: dict[str, list[Event]] = {}
    for i, case in enumerate(CASES):
        msg = wire.recv(0)
        w = make_world(device=device)
        slots = random.Random(seed + 1).sample(range(30, 60), 12)  # the receiver's own slot numbers
        if case == "stale":  # the receiver's slots held an older request (a stale page stays behind)
            prev = Req(row=3, tokens=[t ^ 5 for t in tokens], slots=slots)
            w.forward([(prev, 0, 12)])
        verifier = TransferVerifier(w.manager, capacity=8)  # smaller than the transfer: chunked
        if i % 2:  # host lists, or tensors on the device (what an engine holds): the same outcome
            accept_transfer(w.manager, verifier, [w.k, w.v], msg, slots, tokens=tokens)
        else:
            accept_transfer(w.manager, verifier, [w.k, w.v], msg, torch.tensor(slots, device=device),
                            tokens=tokens_t.to(device))
        found = events(w.manager)
        req = Req(row=1, tokens=[*tokens, 7], slots=[*slots, 61])
        w.forward([(req, 12, 1)])  # first use: one decode step over the received prefix
        out[case] = found + [("after_decode", *e[1:]) for e in events(w.manager)[len(found):]]
    return out


def hang(rank: int, world_size: int, seconds: float) -> None:
    """A rank that never finishes in time (the bounded join must end the group)."""
    time.sleep(seconds)

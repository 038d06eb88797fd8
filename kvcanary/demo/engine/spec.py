"""Speculative decoding with a draft model (linear chain, EAGLE-style +1 token offset).

The draft pool shares slots and ``req_to_token`` with the target, but its slot ``p`` holds the KV of token
``p + 1`` (the draft's input at position ``p`` is the next token): its canary manager has
``kv_token_id_vs_position_offset = 1``. Per step: ``k - 1`` draft decodes propose ``d_2..d_k`` (``d_1`` came
from the previous draft extend), the target verifies ``[t_L, d_1..d_k]``, the accepted prefix plus the
bonus token is kept, the rejected drafts' slots are freed (rollback), and a draft extend rewrites the draft
KV of the accepted positions.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from kvcanary.demo.engine.config import EngineConfig
from kvcanary.demo.engine.faults import Fault, FaultInjector
from kvcanary.demo.engine.forward_batch import RowWork
from kvcanary.demo.engine.kv_access import PoolKv
from kvcanary.demo.engine.kv_pool import KvPool, ReqToTokenPool
from kvcanary.demo.engine.memory import KvMemory
from kvcanary.demo.engine.model import TinyTransformer
from kvcanary.demo.engine.requests import Request, RequestTable
from kvcanary.demo.engine.runner import ForwardRunner, ModelPass
from kvcanary.demo.engine.step_report import StepReport
from kvcanary.manager import CanaryManager

DECODE_SLOT = 0  # the target's decode (verify) forward slot


@dataclass(frozen=True)
class SpecOutcome:
    """Per verified row: drafts proposed, how many were accepted, the tokens kept (accepted + bonus)."""

    drafts: list[int]
    accepted: int
    kept: list[int]


class DraftWorker:
    """The draft model and its KV pool (full attention, slot indices shared with the target).

    The draft runs the target's weights (self-speculation) on the sequence shifted by one token, so its
    proposals are often, not always, accepted: its context lacks token 0.
    """

    def __init__(self, cfg: EngineConfig, *, target: TinyTransformer, r2t: ReqToTokenPool,
                 device: torch.device) -> None:
        self.k = cfg.num_draft_tokens
        mc = cfg.model
        self.model = target
        self.pool = KvPool(num_slots=cfg.num_slots, layers=mc.n_layers, n_kv_heads=mc.n_kv_heads,
                           head_dim=mc.head_dim, device=device)
        self.kv = PoolKv(pool=self.pool, swa=None, r2t=r2t, layer_map=[(False, i) for i in range(mc.n_layers)],
                         window=0, faults=FaultInjector())
        self.rollbacks = 0
        self.rejected_slots = 0
        self.recently_rejected: deque[int] = deque(maxlen=4096)  # slots freed by rollbacks (tests, stats)
        self.accepted_tokens = 0
        self.proposed_tokens = 0


def accept(drafts: list[int], predictions: list[int]) -> SpecOutcome:
    """Greedy acceptance: keep drafts while they equal the target's prediction at the previous position,
    then the target's prediction after the last accepted one (the bonus token)."""
    a = 0
    while a < len(drafts) and drafts[a] == predictions[a]:
        a += 1
    return SpecOutcome(list(drafts), a, [*drafts[:a], predictions[a]])


class SpecDecoder:
    """One engine's speculative decode step and draft extend. Slots come from the engine's memory; every
    change of a request (reservations, kept tokens, rollback, next draft) goes through its request table."""

    def __init__(self, worker: DraftWorker, *, target: ModelPass, draft_canary: CanaryManager | None,
                 runner: ForwardRunner, requests: RequestTable, memory: KvMemory, faults: FaultInjector) -> None:
        self.worker = worker
        self.target = target
        self.draft = ModelPass(worker.model, worker.kv, draft_canary)
        self.runner = runner
        self.requests = requests
        self.memory = memory
        self.faults = faults

    def decode(self, reqs: list[Request], finishing: list[Request], rep: StepReport) -> list[RowWork]:
        """Draft decodes, target verify, acceptance, rollback; returns the draft-extend rows."""
        w, table, run = self.worker, self.requests, self.runner
        k = w.k
        slots = {r.rid: self.memory.alloc_slots(k + 1) for r in reqs}
        for r in reqs:
            table.reserve(r, slots[r.rid])
            if self.faults.fire(Fault.POSITION_OFF_BY_ONE, f"request {r.rid} position advanced before the drafts"):
                table.advance_position(r)  # BUG: the in-place advance ran before the draft forwards
        drafts = {r.rid: [r.draft_next] for r in reqs}
        for j in range(1, k):
            stray = (self.memory.alloc_slots(1) if j == k - 1 and self.faults.fire(
                Fault.DRAFT_PAST_ALLOCATION, f"request {reqs[0].rid}: draft {j} written past its allocation")
                else [])
            rows = [RowWork(r, r.kv_len + j - 1, 1, [drafts[r.rid][-1]], [r.next_position + j - 1],
                            [stray[0] if stray and i == 0 else slots[r.rid][j - 1]]) for i, r in enumerate(reqs)]
            fwd = run.build(rows)
            logits = run.run(fwd, self.draft, j - 1)
            if stray:
                self.memory.free_slots(stray)  # BUG: the stray slot was never the request's
            for i, r in enumerate(reqs):
                drafts[r.rid].append(int(logits[fwd.row_starts[i]].argmax()))
        rows = [RowWork(r, r.kv_len, k + 1, [r.tokens[r.kv_len], *drafts[r.rid]],
                        [r.next_position + i for i in range(k + 1)], slots[r.rid]) for r in reqs]
        fwd = run.build(rows, padded=True)
        rep.decode_rows, rep.padded_rows = len(reqs), len(fwd.rows) - len(reqs)
        logits = run.run(fwd, self.target, DECODE_SLOT)
        preds = logits.argmax(-1).tolist()
        extend_rows = []
        for i, r in enumerate(reqs):
            if r.abort_pending or r.retract_pending:
                continue
            start = fwd.row_starts[i]
            out = accept(drafts[r.rid], [int(p) for p in preds[start : start + k + 1]])
            old = r.kv_len
            keep = out.accepted + 1
            table.commit_tokens(r, out.kept)
            w.proposed_tokens += k
            w.accepted_tokens += out.accepted
            rejected = table.rollback_drafts(r)
            if rejected:
                w.rollbacks += 1
                w.rejected_slots += len(rejected)
                w.recently_rejected.extend(rejected)
            extend_rows.append(RowWork(r, old, keep, r.tokens[old + 1 : old + 1 + keep],
                                       list(range(old, old + keep)), slots[r.rid][:keep]))
            if r.num_outputs >= r.max_new_tokens:
                finishing.append(r)
        return extend_rows

    def extend(self, rows: list[RowWork]) -> None:
        """The draft rewrites its KV for the accepted positions (and prefill chunks); its last output is the
        next first draft token of each row."""
        fwd = self.runner.build(rows)
        logits = self.runner.run(fwd, self.draft, self.worker.k - 1)
        for i, rw in enumerate(rows):
            assert rw.req is not None
            self.requests.set_draft(rw.req, int(logits[fwd.row_starts[i] + rw.extend - 1].argmax()))

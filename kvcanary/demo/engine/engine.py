"""The serving loop: admission with prefix matching, chunked prefill, decode (or speculative decode),
aborts, retracts, PD transfers, and the canary around every forward.

One step::

    in-flight set  = running decode and prefill requests (formed first, as an overlap scheduler would)
    controls       = aborts / retracts queued since the last step (their releases wait for the forwards)
    admission      = waiting requests, prefix-matched, into the prefill token budget
    decode forward = one row per decode request (graph-padded), or the speculative draft + verify forwards
    extend forward = the prefill chunks (then the draft extend)
    finalize       = finished requests to the radix tree, aborted/retracted ones released, SWA eviction
    canary         = end_step of every manager (sweep, pump, reports, health, stats)
"""

from __future__ import annotations

import torch

from kvcanary.consts import CanaryMode
from kvcanary.demo.engine.canary_wiring import attach_canaries
from kvcanary.demo.engine.config import EngineConfig
from kvcanary.demo.engine.faults import Fault, FaultInjector
from kvcanary.demo.engine.forward_batch import RowWork
from kvcanary.demo.engine.guard import DemoGuard
from kvcanary.demo.engine.journal_feed import JournalFeed
from kvcanary.demo.engine.kv_access import PoolKv
from kvcanary.demo.engine.memory import KvMemory
from kvcanary.demo.engine.model import TinyTransformer
from kvcanary.demo.engine.requests import ReqState, Request, RequestTable
from kvcanary.demo.engine.runner import ForwardRunner, ModelPass
from kvcanary.demo.engine.spec import DraftWorker, SpecDecoder
from kvcanary.demo.engine.step_report import StepReport
from kvcanary.demo.engine.transfer import RemotePrefill, RemotePuller
from kvcanary.extensions import write_owner_on
from kvcanary.guard import ViolationPolicy
from kvcanary.manager import CanaryConfig, CanaryManager, ViolationEvent

DECODE_SLOT, EXTEND_SLOT = 0, 1


class Engine:
    """A small serving engine over :class:`TinyTransformer`; ``canary`` None or mode NONE runs without it.
    With ``canary.on_violation`` ISOLATE, :attr:`guard` fails the requests that read corrupt KV and
    quarantines its slots (for ``reinstate_after`` steps; None: for the rest of the run).

    The engine schedules; :attr:`requests` (a :class:`RequestTable`) makes every change of request state.
    """

    def __init__(self, cfg: EngineConfig, *, canary: CanaryConfig | None = None, faults: FaultInjector | None = None,
                 model: TinyTransformer | None = None, name: str = "engine",
                 reinstate_after: int | None = None, journal: bool = False) -> None:
        self.cfg = cfg
        self.name = name
        self.device = torch.device(cfg.device)
        self.faults = faults if faults is not None else FaultInjector()
        self.memory = KvMemory(cfg, self.device, self.faults)
        self.model = model if model is not None else TinyTransformer(
            cfg.model, device=self.device, window=lambda li: cfg.swa_window if cfg.is_swa_layer(li) else 0)
        mem = self.memory
        layer_map = [(True, mem.swa_layers.index(i)) if cfg.is_swa_layer(i) else (False, mem.full_layers.index(i))
                     for i in range(cfg.model.n_layers)]
        self.kv = PoolKv(pool=mem.pool, swa=mem.swa, r2t=mem.r2t, layer_map=layer_map, window=cfg.swa_window,
                         faults=self.faults)
        k = cfg.num_draft_tokens
        self.runner = ForwardRunner(self.device, buckets=cfg.buckets, tokens_per_row=k + 1, faults=self.faults)
        self.draft = DraftWorker(cfg, target=self.model, r2t=mem.r2t, device=self.device) if k else None
        self.canary: CanaryManager | None = None
        self.draft_canary: CanaryManager | None = None
        if canary is not None and canary.mode is not CanaryMode.NONE:
            self.canary, self.draft_canary = attach_canaries(
                cfg, mem, self.draft.pool if self.draft is not None else None, canary)
        self.target = ModelPass(self.model, self.kv, self.canary)
        self.requests = RequestTable(mem, name=name)
        self.guard: DemoGuard | None = None
        """The isolate policy's journal feeder and adapter (``canary.on_violation`` ISOLATE only)."""
        if canary is not None and self.canary is not None and canary.policy is ViolationPolicy.ISOLATE:
            self.guard = DemoGuard(mem, self.requests, self.managers, window=cfg.swa_window,
                                   reinstate_after=reinstate_after)
            self.runner.observer = self.guard.observe
        self.spec = (SpecDecoder(self.draft, target=self.target, draft_canary=self.draft_canary, runner=self.runner,
                                 requests=self.requests, memory=mem, faults=self.faults)
                     if self.draft is not None else None)
        self.step_index = 0
        self.journal_feed: JournalFeed | None = None
        """What feeds the managers' slot journals: on with ``journal=True`` (evidence bundles) and with the
        write-time owner check, whose map frees and locks slots from the journals' events."""
        if self.canary is not None and (journal or write_owner_on(canary.extensions if canary else None)):
            self.journal_feed = JournalFeed(self)
        self._remote: RemotePuller | None = None
        self._controls: list[tuple[str, int]] = []
        self.pressure_retracts = 0

    @property
    def managers(self) -> list[CanaryManager]:
        return [m for m in (self.canary, self.draft_canary) if m is not None]

    def attach_prefill_peer(self, peer: Engine) -> None:
        """Serve ``remote_prefill`` requests PD-style: prefill on ``peer``, transfer, decode here."""
        if peer.cfg.model != self.cfg.model or peer.cfg.swa_window != self.cfg.swa_window:
            raise ValueError("PD peer must run the same model and attention layout")
        if self.draft is not None or peer.draft is not None:
            raise ValueError("PD transfer is not supported together with speculative decoding")
        self._remote = RemotePrefill(peer=peer, memory=self.memory, requests=self.requests, canary=self.canary,
                                     faults=self.faults, chunk=self.cfg.transfer_chunk)

    def attach_remote_prefill(self, puller: RemotePuller) -> None:
        """Serve ``remote_prefill`` requests through ``puller`` (e.g. a prefill worker in another process)."""
        if self.draft is not None:
            raise ValueError("PD transfer is not supported together with speculative decoding")
        self._remote = puller

    # -- requests -----------------------------------------------------------------------------------------
    def submit(self, prompt: list[int], max_new_tokens: int, *, rid: int | None = None, remote_prefill: bool = False,
               hold_for_transfer: bool = False) -> Request:
        rid = self.requests.claim_rid(rid)
        if len(prompt) + max_new_tokens + self.cfg.num_draft_tokens + 1 > self.cfg.max_context_len:
            raise ValueError(f"{self.name}: request {rid} needs {len(prompt) + max_new_tokens} positions, more than "
                             f"max_context_len={self.cfg.max_context_len}")
        if any(not 0 <= t < self.cfg.model.vocab_size for t in prompt):
            raise ValueError(f"{self.name}: request {rid} has token ids outside [0, {self.cfg.model.vocab_size})")
        if remote_prefill and self._remote is None:
            raise ValueError(f"{self.name}: remote_prefill needs attach_prefill_peer() first")
        return self.requests.submit(rid, prompt, max_new_tokens, remote_prefill=remote_prefill,
                                    hold_for_transfer=hold_for_transfer, step=self.step_index)

    def _control(self, kind: str, rid: int) -> None:
        if rid not in self.requests:
            raise ValueError(f"{self.name}: {kind}: unknown request id {rid}")
        self._controls.append((kind, rid))

    def abort(self, rid: int) -> None:
        """Abort a request at the next step (its releases wait until that step's forwards are done)."""
        self._control("abort", rid)

    def retract(self, rid: int) -> None:
        """Pause a running request: its KV is released and it re-prefills (from the cache) on resume."""
        self._control("retract", rid)

    def resume(self, rid: int) -> None:
        self._control("resume", rid)

    @property
    def idle(self) -> bool:
        return self.requests.idle

    def release_transferred(self, req: Request) -> None:
        """PD prefill side: the decode side has copied ``req``'s KV; hand it to the tree."""
        self.requests.release_transferred(req)

    # -- warmup ---------------------------------------------------------------------------------------------
    def warmup(self) -> None:
        """One padding-only forward through every model (like warmup / graph capture), then arm the
        canary's chain-position assert."""
        row = RowWork(None, 0, 1, [0], [0], [0])
        fwd = self.runner.build([row])
        self.runner.run(fwd, self.target, DECODE_SLOT)
        if self.spec is not None:
            self.runner.run(fwd, self.spec.draft, 0)
        for m in self.managers:
            m.mark_init_finished()

    # -- the step -------------------------------------------------------------------------------------------
    def step(self) -> StepReport:
        """One scheduler iteration (see the module docstring for the order of its phases)."""
        self.faults.step = self.step_index
        rep = StepReport(self.step_index)
        running = self.requests.running
        decode_reqs = [r for r in running if r.state is ReqState.DECODE]
        prefill_reqs = [r for r in running if r.state is ReqState.PREFILL]
        self._apply_controls()
        chunks: list[tuple[Request, int]] = []
        budget = self.cfg.chunk_size
        for r in prefill_reqs:
            e = min(r.prefill_target - r.kv_len, budget)
            if e > 0:
                chunks.append((r, e))
                budget -= e
        budget = self._admit(chunks, budget)
        decode_reqs = self._relieve_pressure(decode_reqs, chunks)
        finishing: list[Request] = []
        draft_rows: list[RowWork] = []  # what the draft extend rewrites (speculative decoding only)
        if decode_reqs and self.spec is not None:
            draft_rows += self.spec.decode(decode_reqs, finishing, rep)
        elif decode_reqs:
            self._decode(decode_reqs, finishing, rep)
        if chunks:
            draft_rows += self._extend(chunks, finishing, rep)
        if self.spec is not None and draft_rows:
            self.spec.extend(draft_rows)
        for r in finishing:
            self.requests.finish(r, self.step_index)
            rep.finished.append(r.rid)
        self._finalize_controls()
        for r in running:
            if r.state is ReqState.DECODE and not r.abort_pending:
                self.requests.evict_swa_window(r)
        if self.guard is not None:
            self.guard.end_of_step()
        rep.canary = [m.end_step() for m in self.managers]
        self.step_index += 1
        return rep

    def _reserved(self) -> int:
        """Slots the running requests may still allocate (the rest of their prefill and every output)."""
        k = self.cfg.num_draft_tokens
        return sum(x.prefill_target - x.kv_len + (x.max_new_tokens - x.num_outputs) * (k + 1)
                   for x in self.requests.running)

    def _admit(self, chunks: list[tuple[Request, int]], budget: int) -> int:
        """Admit waiting requests in queue order (paused ones stay queued) while rows, the prefill budget
        and the pool (after eviction and the running requests' reservations) allow; prefix-match each and
        queue its first chunk."""
        mem = self.memory
        k = self.cfg.num_draft_tokens
        for r in list(self.requests.waiting):
            if not (budget > 0 and len(self.requests.running) < self.cfg.max_running and mem.rows.available):
                break
            if r.paused:
                continue
            if r.remote_prefill:
                # a transfer allocates the whole prompt at once (no retract can relieve it): it must fit now
                if (mem.free_capacity() - self._reserved() < len(r.tokens) + r.max_new_tokens
                        or mem.free_capacity() < len(r.tokens)):
                    break
                assert self._remote is not None  # submit() checked
                self._remote.pull(r)
                continue
            slots, node = mem.match(r)
            if not slots:
                node = None
            if node is not None and mem.tree is not None:
                mem.tree.inc_lock(node)
            need = len(r.tokens) - len(slots) + (r.max_new_tokens - r.num_outputs) * (k + 1)
            if mem.free_capacity() - self._reserved() < need:
                if node is not None and mem.tree is not None:
                    mem.tree.dec_lock(node)
                break
            self.requests.admit(r, slots, node)
            e = min(r.prefill_target - r.kv_len, budget)
            chunks.append((r, e))
            budget -= e
        return budget

    def _relieve_pressure(self, decode_reqs: list[Request], chunks: list[tuple[Request, int]]) -> list[Request]:
        """If this step's allocations cannot fit, retract the latest decode requests (they re-prefill
        from the cache later), as a scheduler does under memory pressure."""
        k = self.cfg.num_draft_tokens
        need = sum(e for _, e in chunks) + len(decode_reqs) * (k + 1)
        decode_reqs = list(decode_reqs)
        while decode_reqs and self.memory.free_capacity() < need:
            victim = decode_reqs.pop()
            if victim.abort_pending or victim.retract_pending:
                continue
            need -= k + 1
            self.requests.retract(victim, pause=False)
            self.pressure_retracts += 1
        return decode_reqs

    def _apply_controls(self) -> None:
        table = self.requests
        for kind, rid in self._controls:
            r = table.get(rid)
            if r is None or r.done:
                continue
            if kind == "resume":
                table.resume(r)
                continue
            if r.state is ReqState.WAITING:
                if kind == "abort":
                    table.abort_waiting(r)
                continue
            if kind == "abort":
                table.mark_abort(r)
                if self.faults.fire(Fault.ROW_RECYCLED, f"abort of request {r.rid} freed req_to_token row {r.row} "
                                    "while the in-flight batch still reads it"):
                    table.release_row(r)  # BUG: the row must outlive the forward that reads it
            else:
                table.mark_retract(r)
        self._controls.clear()

    def _finalize_controls(self) -> None:
        for r in list(self.requests.running):
            if r.abort_pending:
                self.requests.abort(r)
            elif r.retract_pending:
                self.requests.retract(r, pause=True)

    # -- forwards -------------------------------------------------------------------------------------------
    def _decode(self, reqs: list[Request], finishing: list[Request], rep: StepReport) -> None:
        table = self.requests
        slots = self.memory.alloc_slots(len(reqs))
        order = list(reqs)
        if sorted(reqs, key=lambda x: x.row) != reqs and self.faults.fire(
                Fault.WRONG_CACHE_LOC, "req_to_token scattered in sorted-row order"):
            order = sorted(reqs, key=lambda x: x.row)  # BUG: the index tensor was sorted, the values were not
        for r, s in zip(order, slots, strict=True):
            table.reserve(r, [s])
        rows = []
        for r, s in zip(reqs, slots, strict=True):
            if self.faults.fire(Fault.POSITION_OFF_BY_ONE, f"request {r.rid} position advanced before the forward"):
                table.advance_position(r)  # BUG: the in-place advance ran before the forward instead of after
            rows.append(RowWork(r, r.kv_len, 1, [r.tokens[r.kv_len]], [r.next_position], [s]))
        fwd = self.runner.build(rows, padded=True)
        rep.decode_rows, rep.padded_rows = len(reqs), len(fwd.rows) - len(reqs)
        nulled = self._null_entries(reqs)
        logits = self.runner.run(fwd, self.target, DECODE_SLOT)
        for row, start, saved in nulled:  # the per-batch table is rebuilt for the next forward
            self.memory.r2t.write(row, start, saved)
        nxt = logits.argmax(-1).tolist()
        for i, r in enumerate(reqs):
            if r.abort_pending or r.retract_pending:
                continue
            table.commit_tokens(r, [int(nxt[fwd.row_starts[i]])])
            if r.num_outputs >= r.max_new_tokens:
                finishing.append(r)

    def _null_entries(self, reqs: list[Request]) -> list[tuple[int, int, list[int]]]:
        """The two zero-slot bug classes, for this forward only: entries of one request's row set to 0 (the
        padding slot) inside its live prefix. Returns what to restore after the forward."""
        out: list[tuple[int, int, list[int]]] = []
        w = self.cfg.swa_window
        for r in reqs:
            lo = hi = 0
            if r.match_len == 0 and r.kv_len >= 4 and self.faults.armed(Fault.PREFIX_MISS_ZERO_ROW):
                lo, hi = 0, min(r.kv_len - 1, 8)  # the miss's first block (never the last position: the seed)
                detail = f"request {r.rid} (a prefix miss): positions [{lo}, {hi}) read as slot 0"
                fault = Fault.PREFIX_MISS_ZERO_ROW
            elif w > 0 and r.kv_len > w + 2 and self.faults.armed(Fault.NULL_BLOCK_IN_WINDOW):
                lo, hi = r.kv_len - 4, r.kv_len - 2  # inside the window [kv_len - w, kv_len)
                detail = f"request {r.rid}: window positions [{lo}, {hi}) read as slot 0"
                fault = Fault.NULL_BLOCK_IN_WINDOW
            if hi > lo and self.faults.fire(fault, detail):
                out.append((r.row, lo, self.memory.r2t.read(r.row, lo, hi)))
                self.memory.r2t.write(r.row, lo, [0] * (hi - lo))  # BUG: the batch's table names slot 0
        return out

    def _extend(self, chunks: list[tuple[Request, int]], finishing: list[Request], rep: StepReport) -> list[RowWork]:
        table = self.requests
        rows = []
        for r, e in chunks:
            slots = self.memory.alloc_slots(e)
            table.reserve(r, slots)
            rows.append(RowWork(r, r.kv_len, e, r.tokens[r.kv_len : r.kv_len + e], list(range(r.kv_len, r.kv_len + e)),
                                slots))
        fwd = self.runner.build(rows)
        rep.extend_rows, rep.extend_tokens = len(rows), sum(e for _, e in chunks)
        logits = self.runner.run(fwd, self.target, EXTEND_SLOT)
        draft_rows = []
        for i, (r, e) in enumerate(chunks):
            if r.abort_pending or r.retract_pending:
                continue
            table.commit_prefill(r, e)
            if r.kv_len >= r.prefill_target:
                table.start_decode(r, int(logits[fwd.row_starts[i] + e - 1].argmax()))
                if r.num_outputs >= r.max_new_tokens or r.hold_for_transfer:
                    finishing.append(r)
            table.cache_prefix(r)
            draft_rows.append(RowWork(r, r.kv_len - e, e, r.tokens[r.kv_len - e + 1 : r.kv_len + 1],
                                      list(range(r.kv_len - e, r.kv_len)), rows[i].locs))
        return draft_rows

    # -- results --------------------------------------------------------------------------------------------
    def flush_canaries(self) -> list[ViolationEvent]:
        """Synchronously read every manager's ring (end of a run)."""
        out: list[ViolationEvent] = []
        for m in self.managers:
            out += m.flush()
        return out

    def events(self) -> list[ViolationEvent]:
        return [e for m in self.managers for e in m.events]

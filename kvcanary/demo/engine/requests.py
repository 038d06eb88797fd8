"""Requests and their lifecycle: the one module where a request's state changes.

A :class:`Request` is frozen for everyone else (the scheduler, speculative decoding, the PD transfer and
KV memory only read it). :class:`RequestTable` holds one engine's requests and queues, and makes every
change as a named transition together with the bookkeeping it implies: the request's req_to_token row,
its slot reservations, its radix-tree lock. One owner keeps those in step, which is what the engine's
bug classes (and the canary) are about::

    WAITING --admit--> PREFILL --start_decode--> DECODE --finish--> FINISHED
    WAITING --receive_transfer--> DECODE                            (PD decode side)
    DECODE --finish, held for transfer--> TRANSFER --release_transferred--> FINISHED  (PD prefill side)
    PREFILL | DECODE --retract--> WAITING        WAITING | PREFILL | DECODE --abort--> ABORTED
    WAITING | PREFILL | DECODE --fail--> FAILED                 (the canary's isolate policy)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcanary.demo.engine.memory import KvMemory
    from kvcanary.demo.engine.radix import TreeNode


class ReqState(str, Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"
    TRANSFER = "transfer"  # prefill done on a PD prefill engine, KV held until the decode side copies it
    FINISHED = "finished"
    ABORTED = "aborted"
    FAILED = "failed"  # ended by the canary's isolate policy: it read corrupt KV (``Request.error`` says which)


@dataclass(frozen=True, slots=True, eq=False)
class Request:
    """``tokens`` = prompt + outputs; the KV holds ``tokens[:kv_len]`` at ``req_to_token[row, :kv_len]``.

    ``protected_len``: leading positions held by the radix tree (locked through ``last_node``); positions
    from there to ``kv_len`` are the request's own slots, and ``[kv_len, alloc_len)`` the slots reserved
    for the forward in flight. ``next_position`` is the position the next decode token is fed at (kept apart
    from ``kv_len``, as engines keep a positions tensor). Read-only: :class:`RequestTable` changes it.
    """

    rid: int
    prompt: Sequence[int]
    max_new_tokens: int
    tokens: Sequence[int] = field(default_factory=list)
    state: ReqState = ReqState.WAITING
    row: int = 0
    kv_len: int = 0
    alloc_len: int = 0
    protected_len: int = 0
    match_len: int = 0
    prefill_target: int = 0
    next_position: int = 0
    last_node: TreeNode | None = None
    swa_evicted_upto: int = 0
    num_outputs: int = 0
    abort_pending: bool = False
    retract_pending: bool = False
    paused: bool = False
    row_released: bool = False
    remote_prefill: bool = False
    hold_for_transfer: bool = False
    draft_next: int = -1
    arrival_step: int = 0
    finish_step: int = -1
    error: str = ""

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError(f"request {self.rid}: prompt must not be empty")
        if self.max_new_tokens <= 0:
            raise ValueError(f"request {self.rid}: max_new_tokens must be positive, got {self.max_new_tokens}")
        if not self.tokens:
            _put(self, tokens=list(self.prompt))

    @property
    def output_ids(self) -> list[int]:
        return list(self.tokens[len(self.prompt):])

    @property
    def done(self) -> bool:
        return self.state in (ReqState.FINISHED, ReqState.ABORTED, ReqState.FAILED)


def _put(req: Request, **changes: object) -> None:
    """The one write path into a :class:`Request` (frozen, so that nothing outside this module writes it)."""
    for name, value in changes.items():
        object.__setattr__(req, name, value)


class RequestTable(Mapping[int, Request]):
    """One engine's requests by id, its waiting queue (admission order) and running set, and every
    transition of a request. ``waiting`` and ``running`` are read-only views."""

    def __init__(self, memory: KvMemory, *, name: str) -> None:
        self._memory = memory
        self._name = name
        self._requests: dict[int, Request] = {}
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []
        self._next_rid = 0

    def __getitem__(self, rid: int) -> Request:
        return self._requests[rid]

    def __iter__(self) -> Iterator[int]:
        return iter(self._requests)

    def __len__(self) -> int:
        return len(self._requests)

    @property
    def waiting(self) -> Sequence[Request]:
        return self._waiting

    @property
    def running(self) -> Sequence[Request]:
        return self._running

    @property
    def idle(self) -> bool:
        return not self._running and not any(not r.paused for r in self._waiting)

    # -- arrival and controls -----------------------------------------------------------------------------
    def claim_rid(self, rid: int | None) -> int:
        """``rid``, or the next unused id when None; an id is never handed out twice."""
        if rid is None:
            rid = self._next_rid
        if rid in self._requests:
            raise ValueError(f"{self._name}: request id {rid} already exists")
        self._next_rid = max(self._next_rid, rid + 1)
        return rid

    def submit(self, rid: int, prompt: Sequence[int], max_new_tokens: int, *, remote_prefill: bool,
               hold_for_transfer: bool, step: int) -> Request:
        """A new request (id from :meth:`claim_rid`) at the back of the waiting queue."""
        req = Request(rid=rid, prompt=list(prompt), max_new_tokens=max_new_tokens, remote_prefill=remote_prefill,
                      hold_for_transfer=hold_for_transfer, arrival_step=step)
        self._requests[rid] = req
        self._waiting.append(req)
        return req

    def resume(self, req: Request) -> None:
        _put(req, paused=False)

    def abort_waiting(self, req: Request) -> None:
        """Abort a request that holds nothing yet."""
        self._waiting.remove(req)
        _put(req, state=ReqState.ABORTED)

    def mark_abort(self, req: Request) -> None:
        """Abort a running request once this step's forwards are done (:meth:`abort`)."""
        _put(req, abort_pending=True)

    def mark_retract(self, req: Request) -> None:
        """Retract a running request once this step's forwards are done (:meth:`retract`)."""
        _put(req, retract_pending=True)

    # -- admission --------------------------------------------------------------------------------------------
    def admit(self, req: Request, slots: list[int], node: TreeNode | None) -> None:
        """WAITING -> PREFILL: a row whose first positions are the cached prefix ``slots`` (the caller has
        locked ``node``, the tree node they end at); the rest of the tokens are to prefill."""
        n = len(slots)
        self._seat(req, slots, protected_len=n, match_len=n, last_node=node, prefill_target=len(req.tokens),
                   state=ReqState.PREFILL)

    def receive_transfer(self, req: Request, tokens: Sequence[int], slots: list[int]) -> None:
        """WAITING -> DECODE on the PD decode side: ``slots`` hold the KV of ``tokens[:len(slots)]``, copied
        from the prefill engine, whose first output token ends ``tokens``."""
        n = len(slots)
        self._seat(req, slots, tokens=list(tokens), prefill_target=n, protected_len=0, match_len=0,
                   next_position=n, num_outputs=req.num_outputs + 1, state=ReqState.DECODE)

    def _seat(self, req: Request, slots: list[int], **changes: object) -> None:
        """Move ``req`` from the queue to the running set with a fresh row whose KV is ``slots``."""
        mem = self._memory
        row = mem.rows.alloc(1)[0]
        mem.r2t.write(row, 0, slots)
        _put(req, row=row, row_released=False, kv_len=len(slots), alloc_len=len(slots), swa_evicted_upto=0,
             **changes)
        self._waiting.remove(req)
        self._running.append(req)

    # -- forwards ----------------------------------------------------------------------------------------------
    def reserve(self, req: Request, slots: list[int]) -> None:
        """The slots the next forward writes for ``req``: its row's positions from ``kv_len`` on."""
        self._memory.r2t.write(req.row, req.kv_len, slots)
        _put(req, alloc_len=req.kv_len + len(slots))

    def advance_position(self, req: Request) -> None:
        """Move the position counter on by one without a token (only the position bug class does this)."""
        _put(req, next_position=req.next_position + 1)

    def commit_prefill(self, req: Request, n: int) -> None:
        """A prefill chunk of ``n`` tokens was written at the reserved slots."""
        _put(req, kv_len=req.kv_len + n)

    def start_decode(self, req: Request, token: int) -> None:
        """PREFILL -> DECODE: the prefill is complete and ``token`` is its output."""
        _put(req, tokens=[*req.tokens, token], num_outputs=req.num_outputs + 1, state=ReqState.DECODE,
             next_position=req.kv_len)

    def commit_tokens(self, req: Request, tokens: Sequence[int]) -> None:
        """Decoded (or verified speculative) ``tokens``: their KV was written at the first reserved slots."""
        n = len(tokens)
        _put(req, tokens=[*req.tokens, *tokens], kv_len=req.kv_len + n, next_position=req.next_position + n,
             num_outputs=req.num_outputs + n)

    def rollback_drafts(self, req: Request) -> list[int]:
        """Free the reserved slots past ``kv_len`` (the rejected drafts' KV) and return them."""
        rejected = self._memory.r2t.read(req.row, req.kv_len, req.alloc_len)
        if rejected:
            self._memory.free_slots(rejected)
        _put(req, alloc_len=req.kv_len)
        return rejected

    def set_draft(self, req: Request, token: int) -> None:
        """The draft model's first proposal for the next speculative step."""
        _put(req, draft_next=token)

    def cache_prefix(self, req: Request) -> None:
        """Hand the computed prefix to the radix tree, which protects it from here on."""
        node = self._memory.cache_unfinished(req)
        if node is not None:
            _put(req, last_node=node, protected_len=req.kv_len)

    def evict_swa_window(self, req: Request) -> None:
        """Free the SWA slots of the request's positions that fell out of its sliding window."""
        upto = self._memory.evict_swa_window(req)
        if upto is not None:
            _put(req, swa_evicted_upto=upto)

    # -- leaving ----------------------------------------------------------------------------------------------
    def finish(self, req: Request, step: int) -> None:
        """Done: FINISHED with its KV handed to the tree, or TRANSFER (held) on a PD prefill engine."""
        if req.hold_for_transfer:
            _put(req, state=ReqState.TRANSFER)
            return
        self._retire(req, finish_step=step)

    def release_transferred(self, req: Request) -> None:
        """TRANSFER -> FINISHED: the decode side has copied the KV."""
        self._retire(req)

    def _retire(self, req: Request, **changes: object) -> None:
        self._memory.cache_finished(req)
        _put(req, last_node=None, protected_len=0, alloc_len=0)
        self.release_row(req)
        _put(req, state=ReqState.FINISHED, **changes)
        self._running.remove(req)

    def abort(self, req: Request) -> None:
        """A running request's abort: its own KV is freed, its tree prefix unlocked, its row returned."""
        self._release(req, retract=False)
        _put(req, state=ReqState.ABORTED)
        self._running.remove(req)

    def fail(self, req: Request, error: str, step: int) -> None:
        """End a request with ``error`` (between steps): its own KV is freed (quarantined slots stay out),
        its tree prefix unlocked, its row returned; nothing it computed goes to the tree."""
        if req.done:
            return
        if req in self._running:
            self._release(req, retract=False)
            self._running.remove(req)
        elif req in self._waiting:
            self._waiting.remove(req)
        _put(req, state=ReqState.FAILED, error=error, finish_step=step)

    def retract(self, req: Request, *, pause: bool) -> None:
        """Back to the head of the queue with its KV released (it re-prefills, from the cache where it can);
        ``pause`` keeps it there until resumed."""
        self._release(req, retract=True)
        _put(req, retract_pending=False, state=ReqState.WAITING, paused=req.paused or pause)
        self._running.remove(req)
        self._waiting.appendleft(req)

    def _release(self, req: Request, *, retract: bool) -> None:
        self._memory.release_uncached(req, retract=retract)
        _put(req, last_node=None, protected_len=0, alloc_len=0, kv_len=0)
        self.release_row(req)

    def release_row(self, req: Request) -> None:
        """Return the request's req_to_token row (once; row 0 is the padding row and never the request's)."""
        if not req.row_released and req.row:
            self._memory.rows.free([req.row])
        _put(req, row_released=True)

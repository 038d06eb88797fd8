"""A request's state in the engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from kvcanary.engine.radix import TreeNode


class ReqState(str, Enum):
    WAITING = "waiting"
    PREFILL = "prefill"
    DECODE = "decode"
    TRANSFER = "transfer"  # prefill done on a PD prefill engine, KV held until the decode side copies it
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(eq=False)
class Request:
    """``tokens`` = prompt + outputs; the KV holds ``tokens[:kv_len]`` at ``req_to_token[row, :kv_len]``.

    ``protected_len``: leading positions held by the radix tree (locked through ``last_node``); positions
    from there to ``kv_len`` are the request's own slots. ``next_position`` is the position the next decode
    token is fed at (kept apart from ``kv_len``, as engines keep a positions tensor).
    """

    rid: int
    prompt: list[int]
    max_new_tokens: int
    tokens: list[int] = field(default_factory=list)
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

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError(f"request {self.rid}: prompt must not be empty")
        if self.max_new_tokens <= 0:
            raise ValueError(f"request {self.rid}: max_new_tokens must be positive, got {self.max_new_tokens}")
        if not self.tokens:
            self.tokens = list(self.prompt)

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[len(self.prompt):]

    @property
    def done(self) -> bool:
        return self.state in (ReqState.FINISHED, ReqState.ABORTED)

"""What the guard decided for one step: the requests to fail and the blocks to quarantine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcanary.manager.reporter import ViolationEvent


@dataclass(frozen=True, slots=True)
class RequestFailure:
    """A request failed because a slot it read held corrupt KV: the structured error an engine returns."""

    request_id: str
    code: str  # the stable catalog code naming the failure (:data:`kvcanary.guard.codes.FAILURE_CODES`)
    check: str  # the check that caught it (``per_forward_head_k_full``, ``sweep_k_full`` ...)
    slot: int
    position: int
    fail_reasons: tuple[str, ...]  # FailReason names
    step: int  # the step whose snapshot recorded the violation
    message: str  # the one-line text an engine puts in the request's error (it ends with the code and alias)
    alias: str | None = None  # the code's name before the catalog (``KVCANARY-CORRUPT-READ`` ...), if any


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """A request that had read the slot but finished before the violation was read back (reported only)."""

    request_id: str
    finished_step: int


@dataclass(frozen=True)
class GuardDecision:
    """One step's decision: fail these requests, quarantine these blocks, for these violations.

    ``quarantine`` names blocks of the full-attention pool (slot // the journal's block size);
    ``quarantine_swa`` those of a sliding-window pool, whose slots are a space of their own."""

    step: int
    events: tuple[ViolationEvent, ...]
    fail: tuple[RequestFailure, ...] = ()
    quarantine: tuple[int, ...] = ()  # block ids
    finished: tuple[FinishedRequest, ...] = ()
    notes: tuple[str, ...] = field(default=())
    quarantine_swa: tuple[int, ...] = ()  # block ids of the sliding-window pool

    @property
    def empty(self) -> bool:
        return not (self.fail or self.quarantine or self.finished or self.quarantine_swa)

    @property
    def failed_ids(self) -> tuple[str, ...]:
        """The ids of the requests to fail, in decision order."""
        return tuple(f.request_id for f in self.fail)

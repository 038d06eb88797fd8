"""What one engine step did (the scheduler's, speculative decoding's and the canary's figures)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcanary.manager import StepStats


@dataclass
class StepReport:
    """What one step did."""

    step: int
    decode_rows: int = 0
    extend_rows: int = 0
    extend_tokens: int = 0
    padded_rows: int = 0
    finished: list[int] = field(default_factory=list)
    canary: list[StepStats] = field(default_factory=list)

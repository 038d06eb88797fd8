"""The sink protocol: what hears about violations and decisions (reports, events, metrics, health, bundles).

Sinks never block a step and cost nothing when nothing fires: the manager calls them only when a step's
read-back holds new rows (``on_violations``) or a decision was made (``on_decision``); ``on_step`` is
called once per ``end_step`` and must be O(1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kvcanary.guard.decision import GuardDecision
    from kvcanary.manager.reporter import ViolationEvent
    from kvcanary.manager.stats import StepStats


class GuardSink(Protocol):
    """Every method is optional in spirit: implement the ones that matter as no-ops otherwise."""

    def on_violations(self, events: Sequence[ViolationEvent]) -> None: ...

    def on_decision(self, decision: GuardDecision) -> None: ...

    def on_step(self, stats: StepStats) -> None: ...

"""What the host does with violations: format them (SGLang's report text), then log them or raise."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kvcanary.consts import CanaryMode
from kvcanary.manager.pump import HostSnapshot
from kvcanary.violations import Violation, format_violation

logger = logging.getLogger("kvcanary.manager")


@dataclass(frozen=True)
class ViolationEvent:
    """One violation as the host saw it: the decoded row, its report, its ring index (its place in the
    read-back: the ring's, but for K's and V's rows of a phase forked under capture, which the read-back puts
    in launch order, :mod:`kvcanary.manager.launch_order`), the step whose
    snapshot first held it (``step_recorded``: it was recorded during that step, after the previous
    snapshot) and the step whose ``end_step`` (or flush) reported it (``step_pumped``)."""

    violation: Violation
    message: str
    ring_index: int
    step_recorded: int
    step_pumped: int


class ViolationReporter:
    """Formats each ring row once, in ring order; logs (LOG) or raises once (RAISE)."""

    def __init__(self, mode: CanaryMode, ring_capacity: int) -> None:
        self.mode = mode
        self.ring_capacity = ring_capacity
        self.events: list[ViolationEvent] = []
        self.total = 0
        self.skipped_verifies = 0
        self._raised = False

    def process(self, snap: HostSnapshot, step_pumped: int) -> list[ViolationEvent]:
        """Report the rows ``snap`` adds; raise ``RuntimeError`` with all their reports in RAISE mode."""
        if snap.skipped_verifies > self.skipped_verifies:
            logger.warning("kv-canary: per-forward verify skipped %d time(s) due to overflow (capacity exceeded); "
                           "check the engine's pool sizing / CanaryCapacities",
                           snap.skipped_verifies - self.skipped_verifies)
            self.skipped_verifies = snap.skipped_verifies
        self.total = max(self.total, snap.write_index)
        start = len(self.events)
        new: list[ViolationEvent] = []
        for i in range(start, len(snap.rows)):
            v = Violation.from_row(snap.rows[i])
            msg = format_violation(v, total_violations=snap.write_index, ring_capacity=self.ring_capacity,
                                   step_when_pumped=step_pumped)
            new.append(ViolationEvent(v, msg, i, snap.step, step_pumped))
        self.events.extend(new)
        if not new or self.mode is CanaryMode.NONE:
            return new
        if self.mode is CanaryMode.LOG:
            for e in new:
                logger.warning(e.message)
        elif not self._raised:
            self._raised = True
            raise RuntimeError("\n".join(e.message for e in new))
        return new

"""What one demo run found: the fault injected (if any), when it fired, and the canary's reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcanary.demo.engine.faults import Fault
    from kvcanary.manager import ViolationEvent


@dataclass(frozen=True)
class RunOutcome:
    """One run. ``fault`` None is the clean run."""

    fault: Fault | None
    fired_step: int | None
    fired_detail: str
    events: tuple[ViolationEvent, ...]
    peer_violations: int
    steps: int
    seconds: float
    protected_tokens: int
    sweep_passes: int
    error: str | None = None
    extensions: bool = False

    @property
    def expect_missed(self) -> bool:
        """An extension-only bug class run with the extensions off: the default checks cannot see it."""
        from kvcanary.demo.engine.faults import EXTENSION_FAULTS

        return self.fault in EXTENSION_FAULTS and not self.extensions

    @property
    def label(self) -> str:
        """The run's name in the printout: the fault (or clean), with ``+ext`` when the extensions were on."""
        name = self.fault.value if self.fault is not None else "clean"
        return f"{name}+ext" if self.extensions else name

    @property
    def first(self) -> ViolationEvent | None:
        return self.events[0] if self.events else None

    @property
    def detected(self) -> bool:
        return bool(self.events)

    @property
    def ok(self) -> bool:
        if self.error is not None:
            return False
        if self.fault is None:
            return not self.events and self.peer_violations == 0
        if self.expect_missed:  # the gap the extensions close: the bug ran and nothing was reported
            return self.fired_step is not None and not self.detected
        return self.detected

    @property
    def tags(self) -> list[str]:
        return sorted({e.violation.tag_name for e in self.events})

    @property
    def reasons(self) -> list[str]:
        seen: list[str] = []
        for e in self.events:
            for label in e.violation.reason_labels:
                if label not in seen:
                    seen.append(label)
        return seen

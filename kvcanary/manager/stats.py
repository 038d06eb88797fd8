"""The per-step stats line (SGLang's format): how much the canary protected and whether every tag ran."""

from __future__ import annotations

from dataclasses import dataclass

from kvcanary.consts import CanaryLaunchTag
from kvcanary.manager.pump import HostSnapshot


@dataclass(frozen=True)
class StepStats:
    """Figures as of the snapshot the host last read (one step behind the device)."""

    step: int
    protected_tokens: int
    sweep_passes: int
    violations: int
    launch_tags_active: int
    launch_tags_total: int
    skipped_verifies: int

    def line(self) -> str:
        """The stats line the manager logs every ``stats_every`` steps (SGLang's format)."""
        return (f"[canary] step={self.step} protected_tokens={self.protected_tokens} sweep_passes={self.sweep_passes} "
                f"violations={self.violations} launch_tags_active={self.launch_tags_active}/{self.launch_tags_total}")

    @classmethod
    def from_snapshot(cls, snap: HostSnapshot | None, *, step: int, sweep_passes: int,
                      tags: list[CanaryLaunchTag]) -> StepStats:
        """The figures of ``snap`` (all zero before the first snapshot) for the manager's active ``tags``."""
        if snap is None:
            return cls(step, 0, sweep_passes, 0, 0, len(tags), 0)
        active = sum(1 for t in tags if snap.kernel_run_counters[int(t)] > 0)
        return cls(step, sum(snap.slot_run_counters), sweep_passes, snap.write_index, active, len(tags),
                   snap.skipped_verifies)

"""The per-step stats line (SGLang's format): how much the canary protected and whether every tag ran."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

from kvcanary.consts import NUM_LAUNCH_TAGS, CanaryLaunchTag
from kvcanary.manager.pump import HEADER_SKIPPED, HostSnapshot


@dataclass(frozen=True)
class StepStats:
    """Figures as of the snapshot the host last read (one step behind the device).

    The fields after ``skipped_verifies`` are what the sinks (:mod:`kvcanary.monitor`) derive their metrics
    and health from: the snapshot's step, the per-tag device counters (cumulative), the ring's capacity and
    the watchdog's state (``warmup``, ``ok``, ``failed`` with its message), and ``source``: which manager made
    them (:func:`new_source`, one number per manager in the process; 0 for figures made elsewhere), so a sink
    fed by one manager after another tells them apart even when the new one's step count matches the old's.
    ``source`` is not compared: two managers' equal figures are equal stats."""

    step: int
    protected_tokens: int
    sweep_passes: int
    violations: int
    launch_tags_active: int
    launch_tags_total: int
    skipped_verifies: int
    snapshot_step: int | None = None
    ring_capacity: int = 0
    kernel_run_counters: tuple[int, ...] = ()
    slot_run_counters: tuple[int, ...] = ()
    tags: tuple[CanaryLaunchTag, ...] = ()
    watchdog: str = "warmup"
    watchdog_error: str | None = None
    source: int = field(default=0, compare=False)

    @property
    def readback_delay(self) -> int | None:
        """Steps between the step that ended and the device state these figures show (None before any)."""
        return None if self.snapshot_step is None else self.step - self.snapshot_step

    def from_new_manager(self, last: StepStats) -> bool:
        """Whether these figures come from another manager than ``last`` (a sink fed by one manager after
        another keeps the old one's totals then): another :attr:`source`, or, for figures made outside a
        manager (``source`` 0), a step count that went back."""
        return self.source != last.source or self.step < last.step

    @property
    def dropped_rows(self) -> int:
        """Violation rows recorded after the ring was full (counted, not kept)."""
        return max(0, self.violations - self.ring_capacity) if self.ring_capacity else 0

    def line(self) -> str:
        """The stats line the manager logs every ``stats_every`` steps (SGLang's format)."""
        return (f"[canary] step={self.step} protected_tokens={self.protected_tokens} sweep_passes={self.sweep_passes} "
                f"violations={self.violations} launch_tags_active={self.launch_tags_active}/{self.launch_tags_total}")

    @classmethod
    def from_snapshot(cls, snap: HostSnapshot | None, *, step: int, sweep_passes: int,
                      tags: Sequence[CanaryLaunchTag], ring_capacity: int = 0, watchdog: str = "warmup",
                      watchdog_error: str | None = None, source: int = 0) -> StepStats:
        """The figures of ``snap`` (all zero before the first snapshot) for the manager's active ``tags``."""
        tags_t = tags if isinstance(tags, tuple) else tuple(tags)
        if snap is None:
            return cls(step, 0, sweep_passes, 0, 0, len(tags), 0, ring_capacity=ring_capacity, tags=tags_t,
                       watchdog=watchdog, watchdog_error=watchdog_error, source=source)
        counters = snap.kernel_run_counters
        active = sum([counters[t] > 0 for t in tags_t])
        return cls(step, sum(snap.slot_run_counters), sweep_passes, snap.write_index, active, len(tags),
                   snap.skipped_verifies, snap.step, ring_capacity, snap.kernel_run_counters,
                   snap.slot_run_counters, tags_t, watchdog, watchdog_error, source)

    @classmethod
    def from_header(cls, header: list[int], *, snapshot_step: int, step: int, sweep_passes: int,
                    tags: tuple[CanaryLaunchTag, ...], ring_capacity: int, watchdog: str,
                    watchdog_error: str | None, source: int = 0) -> StepStats:
        """What :meth:`from_snapshot` makes of the snapshot whose pump header (``SnapshotPump.header``) is
        ``header``, without the snapshot (the manager's per-step path: the header is all the figures need)."""
        kernel, slot = tuple(header[1 : 1 + NUM_LAUNCH_TAGS]), tuple(header[1 + NUM_LAUNCH_TAGS : HEADER_SKIPPED])
        # built once per step: the fields go into the instance's dict in one call (a frozen dataclass's __init__
        # sets them one object.__setattr__ at a time), the same object as cls(...) would make
        out = object.__new__(cls)
        out.__dict__.update(zip(_FIELDS, (
            step, sum(slot), sweep_passes, header[0], sum([kernel[t] > 0 for t in tags]), len(tags),
            header[HEADER_SKIPPED], snapshot_step, ring_capacity, kernel, slot, tags, watchdog, watchdog_error,
            source), strict=True))
        return out


_SOURCES = itertools.count(1)


def new_source() -> int:
    """A number no other caller in this process got (from 1): a manager's :attr:`StepStats.source`."""
    return next(_SOURCES)


_FIELDS = tuple(f.name for f in fields(StepStats))
"""StepStats' field names in order (:meth:`StepStats.from_header` fills them positionally)."""

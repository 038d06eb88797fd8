"""What one run of an engine under the isolate policy did, against a reference run of the same workload, and
the block ``kvcanary demo --on-violation isolate`` prints for it (for kvcanary's demo engine and for
transformers alike).

The promise a run keeps (:attr:`IsolationOutcome.ok`): every served request's tokens equal the reference's;
every failed request held a slot a violation named (or a quarantined one); no violation names a quarantined
slot after its quarantine; every request ended; the engine did not break. A clean run also fails nothing
and reports nothing; a run that must fire (``must_fire``) also fired and was reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class Units:
    """How an engine names what it quarantines: ``main`` prefixes the full-attention pool's ids in the
    ``quarantined:`` line, ``swa`` names the sliding-window pool's, ``noun`` is one of them."""

    main: str
    swa: str
    noun: str


SLOTS = Units(main="", swa="SWA slots", noun="slot")
"""kvcanary's demo engine quarantines slots (of its full pool, and of its SWA pool)."""
BLOCKS = Units(main="blocks ", swa="ring blocks", noun="block")
"""transformers quarantines paged blocks (of its cache, and of its sliding-window ring)."""


def request_order(rid: str) -> tuple[int, int, str]:
    """Sort key of request ids: numbers by value (``2`` before ``10``), then other ids as text."""
    return (0, int(rid), "") if rid.isdigit() else (1, 0, rid)


def sorted_ids(ids: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(ids, key=request_order))


@dataclass(frozen=True)
class IsolationOutcome:
    """One isolate-policy run against the reference run of the same engine configuration and workload."""

    label: str  # the scenario: a fault class (``kv_flip_used+ext``, ``stale_swa_block (swa)``) or ``clean``
    injected: bool  # whether a fault was armed (False: the clean run)
    fired_step: int | None  # the step the fault fired in (None: it did not)
    violations: int  # violation rows reported
    failed: Mapping[str, str]  # request id -> the error text the engine ended it with
    served_equal: tuple[str, ...]  # served, tokens identical to the reference run's
    served_changed: tuple[str, ...]  # served, tokens different
    affected: frozenset[str]  # requests that held a reported or quarantined slot
    quarantined: tuple[int, ...]  # ids (in ``units``) of the full-attention pool
    quarantined_swa: tuple[int, ...]  # ids of the sliding-window pool
    finished_reported: tuple[tuple[str, int], ...]  # (request id, finish step): read the damage, finished first
    repeated: int  # violations on a quarantined slot recorded after its quarantine
    seconds: float
    units: Units = SLOTS
    reference: str = "the clean run"  # what the served tokens are compared with, as the printed line says
    must_fire: bool = False  # a fault run keeps the promise only if it fired and was reported
    unfinished: tuple[str, ...] = ()  # requests that never ended
    error: str | None = None  # the engine's own error, when a fault broke it
    uncovered: tuple[str, ...] = ()  # violations whose window the journal no longer covers: affected may be short

    @property
    def healthy_failed(self) -> tuple[str, ...]:
        """Failed requests that held no reported or quarantined slot."""
        return sorted_ids(r for r in self.failed if r not in self.affected)

    @property
    def ok(self) -> bool:
        if self.error is not None or self.served_changed or self.healthy_failed or self.repeated or self.unfinished:
            return False
        if not self.injected:
            return not self.failed and not self.violations
        return not self.must_fire or (self.fired_step is not None and self.violations > 0)


def _ids(xs: Sequence[object]) -> str:
    return ", ".join(str(x) for x in xs) or "none"


def _quarantined(xs: Sequence[int], noun: str) -> str:
    if len(xs) > 12:
        return f"{len(xs)} {noun}s ({', '.join(str(x) for x in xs[:6])}, ...)"
    return _ids(xs)


def describe(o: IsolationOutcome, out: TextIO) -> None:
    """The per-run block of ``kvcanary demo [--engine transformers] --on-violation isolate``."""
    u = o.units
    out.write(f"\n=== {o.label} [isolate: {'OK' if o.ok else 'FAILED'}] ({o.seconds:.1f}s)\n")
    if o.error is not None:
        out.write(f"  engine error: {o.error}\n")
    if not o.injected:
        fired = "no fault injected"
    else:
        fired = f"fault fired in step {o.fired_step}" if o.fired_step is not None else "fault did not fire"
    out.write(f"  {fired}; {o.violations} violation row(s)\n")
    failed = sorted_ids(o.failed)
    out.write(f"  failed:      {_ids(failed)}\n")
    for rid in failed:
        out.write(f"    {o.failed[rid]}\n")
    out.write(f"  served:      {len(o.served_equal) + len(o.served_changed)} request(s), "
              f"{len(o.served_equal)} identical to {o.reference}"
              + (f", CHANGED: {_ids(o.served_changed)}" if o.served_changed else "") + "\n")
    if o.finished_reported:
        out.write("  finished before the read-back (reported): "
                  + ", ".join(f"{r} (step {s})" for r, s in o.finished_reported) + "\n")
    out.write(f"  quarantined: {u.main}{_quarantined(o.quarantined, u.noun)}"
              + (f"; {u.swa} {_quarantined(o.quarantined_swa, u.noun)}" if o.quarantined_swa else "") + "\n")
    if o.healthy_failed:
        out.write(f"  HEALTHY REQUESTS FAILED: {_ids(o.healthy_failed)}\n")
    if o.repeated:
        out.write(f"  {o.repeated} violation(s) on quarantined {u.noun}s after their quarantine\n")
    if o.unfinished:
        out.write(f"  requests that never ended: {_ids(o.unfinished)}\n")
    for note in o.uncovered:
        out.write(f"  {note}\n")


def summary(outcomes: Sequence[IsolationOutcome], seconds: float, promise: str) -> str:
    """The last line: how many runs, and ``promise`` when every run kept it, else the runs that did not."""
    bad = [o.label for o in outcomes if not o.ok]
    return (f"{len(outcomes)} run(s) under the isolate policy in {seconds:.1f}s: "
            + (promise if not bad else f"{len(bad)} run(s) FAILED: {', '.join(bad)}"))

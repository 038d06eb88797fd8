"""The demo under the ``isolate`` policy: per fault class, the requests failed, the requests served (and
whether their tokens equal the clean run's), the slots quarantined, and the promise checked.

The promise: every request that held a slot a violation named (or a quarantined slot) fails, or is served
tokens identical to the clean run (it was recomputed from clean KV, or finished before it read the damage);
every request that held none is served and identical to the clean run; no violation names a quarantined
slot after its quarantine. Runs drain the engine after the workload, so that every request ends. Each run
is an :class:`~kvcanary.guard.outcome.IsolationOutcome` in slots, printed as transformers' runs are.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from kvcanary.guard.outcome import IsolationOutcome, describe, sorted_ids, summary
from kvcanary.guard.policy import uncovered_note

if TYPE_CHECKING:
    from kvcanary.demo.engine import Engine, Fault
    from kvcanary.demo.run import DemoSettings

DRAIN_STEPS = 400
"""Steps after the workload's last one, at most, for the requests still running to end."""

Ends = dict[int, tuple[str, tuple[int, ...]]]
"""Request id -> (final state, output tokens)."""


def ends(engine: Engine) -> Ends:
    return {rid: (r.state.value, tuple(r.output_ids)) for rid, r in engine.requests.items()}


def drive_and_drain(engine: Engine, peer: Engine, settings: DemoSettings) -> str | None:
    """Drive the workload, then step until idle; flush both canaries. The engine's error, if it broke."""
    from kvcanary.demo.engine import drive, shared_prefix_workload

    drafts = engine.cfg.num_draft_tokens > 0
    workload = shared_prefix_workload(seed=settings.seed, vocab_size=engine.cfg.model.vocab_size,
                                      steps=settings.steps, remote_prefill=not drafts)
    error = None
    try:
        drive(engine, workload, settings.steps)
        for _ in range(DRAIN_STEPS):
            if engine.idle:
                break
            engine.step()
    except Exception as exc:  # a fault can break the engine itself: report it
        error = f"{type(exc).__name__}: {exc}"
    engine.flush_canaries()
    peer.flush_canaries()
    return error


def run_isolated(fault: Fault | None, settings: DemoSettings, *, extensions: bool = False,
                 clean: Ends | None = None) -> IsolationOutcome:
    """One run of the demo workload with ``fault`` armed under the isolate policy, compared with ``clean``
    (the same engine configuration's clean run under the log policy; run here when None)."""
    from kvcanary.demo.run import build_engines
    from kvcanary.guard import ViolationPolicy

    if clean is None:
        ref, ref_peer, _ = build_engines(fault, settings, extensions=extensions)
        ref.faults.fault = None  # the same configuration (drafts or not), nothing armed
        drive_and_drain(ref, ref_peer, settings)
        clean = ends(ref)
    start = time.perf_counter()
    engine, peer, _ = build_engines(fault, settings, extensions=extensions, policy=ViolationPolicy.ISOLATE)
    error = drive_and_drain(engine, peer, settings)
    guard = engine.guard
    assert guard is not None
    got = ends(engine)
    served = [r for r, (state, _) in got.items() if state == "finished"]
    equal = sorted_ids(str(r) for r in served if got[r] == clean.get(r))
    changed = sorted_ids(str(r) for r in served if got[r] != clean.get(r))
    unfinished = sorted_ids(str(r) for r, (state, _) in got.items()
                            if state not in ("finished", "failed", "aborted"))
    last = engine.canary.step if engine.canary is not None else 0
    affected: set[str] = set()
    repeated = 0
    uncovered: list[str] = []
    quarantine_step: dict[tuple[bool, int], int] = {}
    for q in guard.quarantines:
        for s in q.slots:
            quarantine_step[(False, s)] = q.step
        for s in q.swa_slots:
            quarantine_step[(True, s)] = q.step
    for m in engine.managers:
        for e in m.events:
            swa = e.violation.tag_name.endswith("_SWA")
            journal = m.swa_journal if swa else m.journal
            slot = e.violation.slot_idx
            affected |= {o.id for o in journal.owners_between(slot, e.step_recorded, last)
                         if o.kind.value == "request"}
            if not journal.covers(e.step_recorded):
                uncovered.append(uncovered_note(e.violation.tag_name, slot, e.step_recorded, last))
            qs = quarantine_step.get((swa, slot))
            if qs is not None and e.step_recorded > qs:
                repeated += 1
    affected |= {str(r) for r, msg in guard.failed.items() if "holds quarantined slot" in msg}
    firing = engine.faults.firings[0] if engine.faults.firings else None
    name = fault.value if fault is not None else "clean"
    return IsolationOutcome(
        label=f"{name}+ext" if extensions else name, injected=fault is not None,
        fired_step=firing.step if firing else None, violations=len(engine.events()),
        failed={str(r): msg for r, msg in guard.failed.items()}, served_equal=equal, served_changed=changed,
        affected=frozenset(affected), quarantined=tuple(sorted(guard.quarantined)),
        quarantined_swa=tuple(sorted(s for q in guard.quarantines for s in q.swa_slots)),
        finished_reported=tuple((f.request_id, f.finished_step) for d in guard.decisions for f in d.finished),
        repeated=repeated, unfinished=unfinished, seconds=time.perf_counter() - start, error=error,
        uncovered=tuple(dict.fromkeys(uncovered)))


def run_isolation_demo(faults: Sequence[Fault], settings: DemoSettings, out: TextIO) -> list[IsolationOutcome]:
    """The clean run then one run per fault class (extension-only classes with the extensions on), each
    under the isolate policy and compared with the clean run of its engine configuration; prints each."""
    from kvcanary.demo.engine.faults import EXTENSION_FAULTS, Fault
    from kvcanary.demo.run import build_engines

    refs: dict[bool, Ends] = {}

    def clean(fault: Fault | None) -> Ends:
        drafts = fault is Fault.DRAFT_PAST_ALLOCATION  # the speculative configuration has its own clean run
        if drafts not in refs:
            ref, ref_peer, _ = build_engines(fault, settings)
            ref.faults.fault = None
            drive_and_drain(ref, ref_peer, settings)
            refs[drafts] = ends(ref)
        return refs[drafts]

    outcomes = [run_isolated(None, settings, clean=clean(None))]
    describe(outcomes[0], out)
    for f in faults:
        o = run_isolated(f, settings, extensions=f in EXTENSION_FAULTS, clean=clean(f))
        describe(o, out)
        outcomes.append(o)
    return outcomes


def main_isolate(faults: Sequence[Fault], settings: DemoSettings) -> int:
    """``kvcanary demo --on-violation isolate``: 0 when every run keeps the promise, 1 otherwise."""
    import logging
    import sys

    import torch

    threads = torch.get_num_threads()
    log = logging.getLogger("kvcanary.manager")
    level = log.level
    if settings.device == "cpu":
        torch.set_num_threads(1)
    log.setLevel(logging.ERROR)  # the runs print what they found
    start = time.perf_counter()
    try:
        outcomes = run_isolation_demo(faults, settings, sys.stdout)
    finally:
        torch.set_num_threads(threads)
        log.setLevel(level)
    print("\n" + summary(outcomes, time.perf_counter() - start, "every affected request failed or was served "
                          "clean, every other request served identical to the clean run"))
    return 0 if all(o.ok for o in outcomes) else 1

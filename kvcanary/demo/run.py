"""The demo's runs: a fresh engine pair per run, the clean run first, then one run per fault class, each
run's block printed as it completes. The command (``kvcanary demo``) is :mod:`kvcanary.cli.demo`.

Heavy imports happen inside the functions, so ``kvcanary --help`` stays fast.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from kvcanary.demo.outcome import RunOutcome
from kvcanary.demo.progress import ProgressBar
from kvcanary.demo.report import describe, header, plan, summary

if TYPE_CHECKING:
    from kvcanary.demo.engine import Engine, Workload
    from kvcanary.demo.engine.faults import Fault
    from kvcanary.guard.violation_policy import ViolationPolicy

DEFAULT_STEPS = 40
DRAFT_TOKENS = 3
"""Speculative tokens per step in the draft bug class's run (the other runs decode without drafts)."""


@dataclass(frozen=True)
class DemoSettings:
    steps: int = DEFAULT_STEPS
    device: str = "cpu"
    backend: str | None = None
    seed: int = 0
    compile: bool = False


def build_engines(fault: Fault | None, settings: DemoSettings, *, extensions: bool = False,
                  policy: ViolationPolicy | None = None) -> tuple[Engine, Engine, Workload]:
    """The demo's engine pair (decode with a PD prefill peer; speculative decoding for the draft bug class)
    with ``fault`` armed, warmed up, and its workload; ``policy`` is the canary's ``on_violation``."""
    import dataclasses

    from kvcanary.consts import RealKvHashMode
    from kvcanary.demo.engine import Engine, EngineConfig, FaultInjector, demo_engine_config, shared_prefix_workload
    from kvcanary.demo.engine.faults import Fault
    from kvcanary.extensions import Extensions
    from kvcanary.manager import CanaryConfig

    ext = Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True) if extensions else None
    canary = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, enable_verify_token=True,
                          sweep_interval=2, health_warmup_steps=10, health_every=10, stats_every=10,
                          backend=settings.backend, extensions=ext, compile=settings.compile, on_violation=policy,
                          guard_history=None)  # the isolate demo's outcome reads every decision and failure
    cfg: EngineConfig = demo_engine_config(settings.device)
    drafts = fault is Fault.DRAFT_PAST_ALLOCATION  # speculative decoding: full attention, no PD peer
    if drafts:
        cfg = dataclasses.replace(cfg, num_draft_tokens=DRAFT_TOKENS, swa_window=0)
    faults = FaultInjector(fault)
    engine = Engine(cfg, canary=canary, faults=faults, name="decode")
    peer = Engine(cfg, canary=canary, model=engine.model, name="prefill")
    if not drafts:
        engine.attach_prefill_peer(peer)
    peer.warmup()
    engine.warmup()
    workload = shared_prefix_workload(seed=settings.seed, vocab_size=cfg.model.vocab_size, steps=settings.steps,
                                      remote_prefill=not drafts)
    return engine, peer, workload


def run_one(fault: Fault | None, settings: DemoSettings, progress: ProgressBar | None = None, *,
            extensions: bool = False) -> RunOutcome:
    """Drive the demo workload through a fresh engine pair with ``fault`` armed (None: clean); ``extensions``
    turns every :class:`kvcanary.Extensions` check on. The draft bug class runs with speculative decoding."""
    from kvcanary.demo.engine import drive

    engine, peer, workload = build_engines(fault, settings, extensions=extensions)
    faults = engine.faults
    label = (fault.value if fault is not None else "clean") + ("+ext" if extensions else "")
    start = time.perf_counter()
    error = None
    try:
        drive(engine, workload, settings.steps,
              on_step=(lambda _s: progress.advance(1, label)) if progress is not None else None)
    except Exception as exc:  # a fault can break the engine itself; report it, do not hide it
        error = f"{type(exc).__name__}: {exc}"
    engine.flush_canaries()
    peer.flush_canaries()
    seconds = time.perf_counter() - start
    mgr = engine.canary
    snap = mgr.last_snapshot if mgr is not None else None
    firing = faults.firings[0] if faults.firings else None
    return RunOutcome(
        fault=fault, fired_step=firing.step if firing else None, fired_detail=firing.detail if firing else "",
        events=tuple(engine.events()), peer_violations=len(peer.events()), steps=settings.steps, seconds=seconds,
        protected_tokens=sum(snap.slot_run_counters) if snap is not None else 0,
        sweep_passes=mgr.sweep_passes if mgr is not None else 0, error=error, extensions=extensions)


def chosen_backends(settings: DemoSettings) -> dict[str, str]:
    """Operation -> the backend its launches get with these settings (raises BackendError if none can)."""
    import torch

    from kvcanary.registry import REGISTRY, Op

    dev = torch.device(settings.device)
    return {op.value: REGISTRY.select(op, dev, settings.backend).backend.name for op in Op}


def run_demo(faults: Sequence[Fault], settings: DemoSettings, out: TextIO | None = None) -> list[RunOutcome]:
    """The clean run, then one run per fault in ``faults``; prints each run's block as it completes, then the
    summary. An extension-only
    bug class runs twice, with the extensions off (missed) and on (caught), after a clean run with them on."""
    import torch

    from kvcanary.demo.engine.faults import EXTENSION_FAULTS

    out = out if out is not None else sys.stdout
    threads = torch.get_num_threads()
    manager_log = logging.getLogger("kvcanary.manager")
    level = manager_log.level
    if settings.device == "cpu":
        torch.set_num_threads(1)  # a tiny model: thread hand-offs cost more than they save
    manager_log.setLevel(logging.ERROR)  # the demo prints the reports itself
    header(settings.device, chosen_backends(settings), out)
    runs: list[tuple[Fault | None, bool]] = [(None, False)]
    if any(f in EXTENSION_FAULTS for f in faults):
        runs.append((None, True))
    for f in faults:
        runs += [(f, False), (f, True)] if f in EXTENSION_FAULTS else [(f, False)]
    plan(faults, len(runs), out)
    out.flush()
    progress = ProgressBar(settings.steps * len(runs))
    outcomes: list[RunOutcome] = []
    try:
        for run_fault, ext in runs:
            outcome = run_one(run_fault, settings, progress, extensions=ext)
            outcomes.append(outcome)
            progress.clear()  # the block goes where the bar was; the next step redraws the bar below it
            describe(outcome, out)
            out.flush()  # a pipe or a CI log sees each run as it completes
    finally:
        progress.close()
        torch.set_num_threads(threads)
        manager_log.setLevel(level)
    summary(outcomes, out)
    return outcomes


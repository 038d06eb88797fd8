"""``kvcanary demo``: a serving workload run clean, then once per fault class, with what the canary caught.

Every run drives the same shared-prefix workload through a small engine (hybrid full + sliding-window
attention, chunked prefill, radix prefix cache with eviction, graph padding, a PD prefill peer) with the
canary in log mode: real-KV fingerprints (partial), K and V halves, token checks and a sweep. The clean
run must report nothing; each fault run must be detected. Exit status 1 otherwise.

Heavy imports happen inside the functions, so ``kvcanary --help`` stays fast.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from kvcanary.cli import arguments

if TYPE_CHECKING:
    from kvcanary.engine.faults import Fault
    from kvcanary.manager import ViolationEvent

DEFAULT_STEPS = 40


class ProgressBar:
    """A one-line progress bar on a terminal (redrawn with ``\\r``); silent when not a terminal."""

    def __init__(self, total: int, *, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = max(1, total)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self._start = time.perf_counter()

    def advance(self, n: int = 1, label: str = "") -> None:
        self.done = min(self.total, self.done + n)
        if not self.enabled:
            return
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self._start
        self.stream.write(f"\r[{bar}] {self.done:4d}/{self.total} {elapsed:5.1f}s {label:<24}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * (self.width + 48) + "\r")
            self.stream.flush()


@dataclass(frozen=True)
class DemoSettings:
    steps: int = DEFAULT_STEPS
    device: str = "cpu"
    backend: str | None = None
    seed: int = 0


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


def run_one(fault: Fault | None, settings: DemoSettings, progress: ProgressBar | None = None) -> RunOutcome:
    """Drive the demo workload through a fresh engine pair with ``fault`` armed (None: clean)."""
    from kvcanary.consts import RealKvHashMode
    from kvcanary.engine import Engine, EngineConfig, FaultInjector, demo_engine_config, drive, shared_prefix_workload
    from kvcanary.manager import CanaryConfig

    canary = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, enable_verify_token=True,
                          sweep_interval=2, health_warmup_steps=10, health_every=10, stats_every=10,
                          backend=settings.backend)
    cfg: EngineConfig = demo_engine_config(settings.device)
    faults = FaultInjector(fault)
    engine = Engine(cfg, canary=canary, faults=faults, name="decode")
    peer = Engine(cfg, canary=canary, model=engine.model, name="prefill")
    engine.attach_prefill_peer(peer)
    peer.warmup()
    engine.warmup()
    workload = shared_prefix_workload(seed=settings.seed, vocab_size=cfg.model.vocab_size, steps=settings.steps)
    label = fault.value if fault is not None else "clean"
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
        sweep_passes=mgr.sweep_passes if mgr is not None else 0, error=error)


def describe(o: RunOutcome, out: TextIO) -> None:
    """The per-run block: what was injected, whether, when and how it was caught, and the first report."""
    from kvcanary.engine.faults import DESCRIPTIONS

    name = o.fault.value if o.fault is not None else "clean"
    status = "OK" if o.ok else "FAILED"
    out.write(f"\n=== {name} [{status}] ({o.seconds:.1f}s)\n")
    if o.fault is None:
        out.write(f"  no fault injected; {len(o.events)} violation(s) on the decode engine, {o.peer_violations} on "
                  f"the prefill engine; {o.protected_tokens} tokens verified, {o.sweep_passes} sweeps\n")
    else:
        out.write(f"  bug: {DESCRIPTIONS[o.fault]}\n")
        if o.fired_step is None:
            out.write("  the buggy code path never ran in this workload\n")
        else:
            out.write(f"  injected at step {o.fired_step}: {o.fired_detail}\n")
        first = o.first
        if first is None:
            out.write("  NOT DETECTED\n")
        else:
            lag = first.step_recorded - o.fired_step if o.fired_step is not None else None
            lag_text = f", {lag} step(s) after the fault" if lag is not None else ""
            out.write(f"  detected in step {first.step_recorded}{lag_text} (on the host at the end of step "
                      f"{first.step_pumped}) by {first.violation.tag_name}: "
                      f"{'+'.join(first.violation.reason_labels)}\n")
            out.write(f"  {len(o.events)} violation row(s); checks that fired: {', '.join(o.tags)}; "
                      f"reasons: {', '.join(o.reasons)}\n")
            if o.fault.value == "corrupted_transfer":
                out.write(f"  prefill side: {o.peer_violations} violation(s) (it never sees the bad copy)\n")
            out.write("  first report:\n")
            for line in first.message.splitlines():
                out.write(f"    {line}\n")
    if o.error is not None:
        out.write(f"  engine error: {o.error}\n")


def summary(outcomes: Sequence[RunOutcome], out: TextIO) -> None:
    out.write("\nsummary\n")
    head = f"{'run':<22} {'fired':>5} {'found':>5} {'lag':>3}  {'first check':<13} {'reasons':<46} {'rows':>5}  result"
    out.write(head + "\n" + "-" * len(head) + "\n")
    for o in outcomes:
        first = o.first
        name = o.fault.value if o.fault is not None else "clean"
        fired = "-" if o.fired_step is None else str(o.fired_step)
        found = "-" if first is None else str(first.step_recorded)
        lag = "-"
        if first is not None and o.fired_step is not None:
            lag = str(first.step_recorded - o.fired_step)
        tag = first.violation.tag_name if first is not None else "-"
        reasons = "+".join(first.violation.reason_labels) if first is not None else "-"
        clean_result = "silent" if o.ok else "FALSE POSITIVE"
        result = clean_result if o.fault is None else ("detected" if o.ok else "MISSED")
        if o.error is not None:
            result += " (engine error)"
        out.write(f"{name:<22} {fired:>5} {found:>5} {lag:>3}  {tag:<13} {reasons:<46} {len(o.events):>5}  {result}\n")


def run_demo(faults: Sequence[Fault], settings: DemoSettings, out: TextIO | None = None) -> list[RunOutcome]:
    """The clean run, then one run per fault in ``faults``; prints each and the summary."""
    import torch

    out = out if out is not None else sys.stdout
    threads = torch.get_num_threads()
    manager_log = logging.getLogger("kvcanary.manager")
    level = manager_log.level
    if settings.device == "cpu":
        torch.set_num_threads(1)  # a tiny model: thread hand-offs cost more than they save
    manager_log.setLevel(logging.ERROR)  # the demo prints the reports itself
    runs: list[Fault | None] = [None, *faults]
    progress = ProgressBar(settings.steps * len(runs))
    outcomes: list[RunOutcome] = []
    try:
        for f in runs:
            outcomes.append(run_one(f, settings, progress))
    finally:
        progress.close()
        torch.set_num_threads(threads)
        manager_log.setLevel(level)
    for o in outcomes:
        describe(o, out)
    summary(outcomes, out)
    return outcomes


@arguments("demo")
def _demo_args(p: argparse.ArgumentParser) -> None:
    from kvcanary.engine.faults import Fault

    p.add_argument("--fault", choices=["all", "none", *[f.value for f in Fault]], default="all",
                   help="the fault class to inject after the clean run (default: every class; none: clean only)")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="engine steps per run")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--seed", type=int, default=0, help="workload seed")


def main(args: argparse.Namespace) -> int:
    """Entry point of ``kvcanary demo``: 0 when the clean run is silent and every fault is detected."""
    from kvcanary.engine.faults import Fault

    if args.steps < 16:
        print("kvcanary demo: --steps must be >= 16 (the workload's faults need that many steps to occur)")
        return 2
    faults = list(Fault) if args.fault == "all" else [] if args.fault == "none" else [Fault(args.fault)]
    from kvcanary.registry import BackendError

    settings = DemoSettings(steps=args.steps, device=args.device, backend=args.backend, seed=args.seed)
    start = time.perf_counter()
    try:
        outcomes = run_demo(faults, settings)
    except BackendError as exc:
        print(f"kvcanary demo: {exc}")
        return 2
    bad = [o for o in outcomes if not o.ok]
    good = "clean run silent" + (", every fault detected" if faults else "")
    print(f"\n{len(outcomes)} run(s) in {time.perf_counter() - start:.1f}s: "
          + (good if not bad else f"{len(bad)} run(s) FAILED"))
    return 1 if bad else 0

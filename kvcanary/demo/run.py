"""The demo's runs and its command: a fresh engine pair per run, the clean run first, then one run per
fault class; ``main`` is ``kvcanary demo`` (exit status 0 when the clean run is silent and every fault is
detected, 1 otherwise).

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

from kvcanary.cli import UsageError, arguments
from kvcanary.demo.outcome import RunOutcome
from kvcanary.demo.progress import ProgressBar
from kvcanary.demo.report import describe, header, summary

if TYPE_CHECKING:
    from kvcanary.demo.engine.faults import Fault

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


def run_one(fault: Fault | None, settings: DemoSettings, progress: ProgressBar | None = None, *,
            extensions: bool = False) -> RunOutcome:
    """Drive the demo workload through a fresh engine pair with ``fault`` armed (None: clean); ``extensions``
    turns every :class:`kvcanary.Extensions` check on. The draft bug class runs with speculative decoding."""
    import dataclasses

    from kvcanary.consts import RealKvHashMode
    from kvcanary.demo.engine import (
        Engine,
        EngineConfig,
        FaultInjector,
        demo_engine_config,
        drive,
        shared_prefix_workload,
    )
    from kvcanary.demo.engine.faults import Fault
    from kvcanary.extensions import Extensions
    from kvcanary.manager import CanaryConfig

    ext = Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True) if extensions else None
    canary = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, enable_verify_token=True,
                          sweep_interval=2, health_warmup_steps=10, health_every=10, stats_every=10,
                          backend=settings.backend, extensions=ext, compile=settings.compile)
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
    """The clean run, then one run per fault in ``faults``; prints each and the summary. An extension-only
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
    progress = ProgressBar(settings.steps * len(runs))
    outcomes: list[RunOutcome] = []
    try:
        for run_fault, ext in runs:
            outcomes.append(run_one(run_fault, settings, progress, extensions=ext))
    finally:
        progress.close()
        torch.set_num_threads(threads)
        manager_log.setLevel(level)
    for o in outcomes:
        describe(o, out)
    summary(outcomes, out)
    return outcomes


def _seed(text: str) -> int:
    """A workload seed: an integer in [0, 2**63 - 1] (what every engine's generator takes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**63 - 1], got {value}")
    return value


@arguments("demo")
def _demo_args(p: argparse.ArgumentParser) -> None:
    from kvcanary.demo.engine.faults import Fault
    from kvcanary.integrations.transformers.fault_kinds import TfFault

    p.add_argument("--engine", choices=["kvcanary", "transformers"], default="kvcanary",
                   help="kvcanary's small engine (default) or transformers' continuous batching (needs the "
                        "'transformers' extra)")
    p.add_argument("--fault", choices=["all", "none", *[f.value for f in Fault],
                                       *[f.value for f in TfFault if f.value not in {g.value for g in Fault}]],
                   default="all",
                   help="the fault class to inject after the clean run (default: every class; none: clean only)")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="engine steps per run")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--seed", type=_seed, default=0, help="workload seed (0 to 2**63 - 1)")
    p.add_argument("--compile", action="store_true",
                   help="run each forward's canary launches through torch.compile (fullgraph, dynamic shapes)")
    p.add_argument("--serve", action="store_true",
                   help="with --engine transformers: serve over HTTP (transformers serve with canaries) and drive it "
                        "with a client; print what each client saw and the metrics that moved")
    p.add_argument("--workers", type=int, choices=[1, 2], default=1,
                   help="2: also run the two-process rows (TP=2 and PD prefill->decode, gloo on the loopback)")


def main(args: argparse.Namespace) -> int:
    """Entry point of ``kvcanary demo``: 0 when the clean run is silent and every fault is detected.

    A bad option, a device torch cannot use or a backend that cannot serve is one line and exit status 2.
    """
    from kvcanary.cli_commands import backend_usage_error, check_backend_name, usable_device
    from kvcanary.demo.engine.faults import Fault
    from kvcanary.registry import BackendError

    if args.engine == "transformers":
        from kvcanary.integrations.transformers.cli import main as transformers_main

        for flag, given in (("--workers 2", args.workers == 2), ("--compile", args.compile)):
            if given:
                raise UsageError(f"{flag} is not available with --engine transformers",
                                 hint="the transformers integration runs eagerly in one process; drop the option, "
                                 "or use the default engine")
        return transformers_main(args)
    if getattr(args, "serve", False):
        raise UsageError("--serve needs --engine transformers", hint="add --engine transformers")
    if args.fault not in ("all", "none") and args.fault not in {f.value for f in Fault}:
        raise UsageError(f"--fault {args.fault} is a fault class of the transformers engine only",
                         hint=f"add --engine transformers, or use one of all, none, "
                         f"{', '.join(f.value for f in Fault)}")
    if args.workers == 2 and args.compile:
        raise UsageError("--compile applies to the single-process runs only, not to --workers 2",
                         hint="drop one of the two options")
    if args.steps < 16:
        raise UsageError(f"--steps must be >= 16, got {args.steps}",
                         hint="the workload's faults need that many steps to occur")
    usable_device(args.device)
    check_backend_name(args.backend)
    faults = list(Fault) if args.fault == "all" else [] if args.fault == "none" else [Fault(args.fault)]
    settings = DemoSettings(steps=args.steps, device=args.device, backend=args.backend, seed=args.seed,
                            compile=args.compile)
    start = time.perf_counter()
    try:
        outcomes = run_demo(faults, settings)
    except BackendError as exc:
        raise backend_usage_error(exc, args.backend) from None
    bad: list[object] = [o for o in outcomes if not o.ok]
    runs = len(outcomes)
    if getattr(args, "workers", 1) == 2:
        from kvcanary.demo.workers import print_rows, worker_rows

        rows = worker_rows(args.steps, args.device, args.backend, args.seed)
        print_rows(rows, sys.stdout)
        bad += [r for r in rows if not r.ok]
        runs += len(rows)
    good = "clean run silent" + (", every fault detected" if faults else "")
    if any(o.expect_missed for o in outcomes):
        good += " (extension-only classes: missed with the extensions off, detected with them on)"
    print(f"\n{runs} run(s) in {time.perf_counter() - start:.1f}s: "
          + (good if not bad else f"{len(bad)} run(s) FAILED"))
    return 1 if bad else 0

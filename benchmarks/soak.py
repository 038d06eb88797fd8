"""The soak, long: the demo engine under a randomized legal workload for 100,000 steps (zero reports allowed),
then fault episodes, each fault class injected at a random step and required to be reported within its bound.

Not part of CI (``tests/demo/test_soak.py`` is the short version). Prints, per layout, the steps, the time
per step, what the workload exercised and the reports (must be 0); then, per fault class, the episodes, the
detection lags (steps from the buggy branch to the first report) against the class's bound, and how many
episodes were harmless (nothing ever read the damage) or crashed the engine before a report. Exit status 1
when a clean run reported anything or an episode missed its bound. Run from the repository root::

    python benchmarks/soak.py                      # 100,000 steps per layout, 100 fault episodes
    python benchmarks/soak.py --steps 20000 --episodes 50 --out soak.json
    python benchmarks/soak.py --on-violation isolate --jobs 2   # each layout, and the episodes, in a process

With ``--jobs N`` the clean run of each layout and the fault episodes run in up to N processes (one thread
each): the same runs, the same seeds, the same checks, their lines interleaved.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from kvcanary.demo.engine.faults import DETECTION_BOUND, Fault
from kvcanary.demo.soak import LAYOUTS, CleanResult, FaultResult, SoakSettings, clean_run, fault_runs
from kvcanary.guard.violation_policy import ViolationPolicy


def _clean(settings: SoakSettings, layout: str) -> CleanResult:
    start = time.perf_counter()
    every = max(1, settings.steps // 20)

    def progress(step: int) -> None:
        if (step + 1) % every == 0:
            rate = (step + 1) / (time.perf_counter() - start)
            print(f"  {layout}: step {step + 1}/{settings.steps} ({rate:.0f} steps/s)", flush=True)

    r = clean_run(layout, settings, on_step=progress)
    print(f"{layout}: {r.steps} steps in {r.seconds:.0f} s ({1e3 * r.seconds / r.steps:.1f} ms/step), "
          f"{r.requests} requests ({r.finished} finished, {r.aborts} aborted, {r.retracts} retracts, "
          f"{r.transfers} PD transfers), {r.prefix_hits} prefix hits, {r.evicted_slots} slots evicted, "
          f"{r.swa_evictions} SWA evictions, {r.rollbacks} draft rollbacks, {r.protected_slots} slot checks: "
          f"{r.reports} reports" + (f", {r.failed} requests failed" if settings.policy is not None else ""),
          flush=True)
    return r


def _faults(settings: SoakSettings) -> list[FaultResult]:
    results = fault_runs(settings, on_episode=lambda r: print(
        f"  {r.fault.value}: armed {r.armed_step}, fired {r.fired_step}, reported {r.detected_step}, lag {r.lag} "
        f"(bound {r.bound})" + (" harmless" if r.harmless else "") + (f" crashed: {r.error}" if r.crashed else "")
        + ("" if r.isolated is None else f", isolated: {r.failed_requests} failed, {r.quarantined_slots} slots "
           f"quarantined" if r.isolated else ", NOT ISOLATED")
        + ("" if r.ok else "  FAILED"), flush=True))
    print(f"{'fault':24} {'episodes':>8} {'caught':>6} {'max lag':>7} {'mean lag':>8} {'bound':>5} {'harmless':>8} "
          f"{'crashed':>7}")
    for fault in Fault:
        rs = [r for r in results if r.fault is fault]
        lags = [r.lag for r in rs if r.lag is not None]
        print(f"{fault.value:24} {len(rs):8} {len(lags):6} {max(lags, default=0):7} "
              f"{(sum(lags) / len(lags) if lags else 0):8.2f} {DETECTION_BOUND[fault]:5} "
              f"{sum(r.harmless for r in rs):8} {sum(r.crashed for r in rs):7}")
    return results


def _threads(device: str) -> None:
    if device == "cpu":
        torch.set_num_threads(1)  # a tiny model: thread hand-offs cost more than they save


def _parallel(settings: SoakSettings, layouts: list[str], jobs: int) -> tuple[list[CleanResult], list[FaultResult]]:
    """Each layout's clean run and the fault episodes, in up to ``jobs`` processes (spawned: torch is not
    fork-safe once its thread pools have started)."""
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_threads, initargs=(settings.device,)) as pool:
        cleans: list[Future[CleanResult]] = [pool.submit(_clean, settings, layout) for layout in layouts]
        episodes = pool.submit(_faults, settings) if settings.episodes else None
        return [f.result() for f in cleans], episodes.result() if episodes is not None else []


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100_000, help="clean steps per layout")
    p.add_argument("--episodes", type=int, default=100, help="fault episodes (the classes in turn)")
    p.add_argument("--layouts", default=",".join(LAYOUTS), help=f"comma-separated, of {', '.join(LAYOUTS)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=None, help="also write every result as JSON here")
    p.add_argument("--jobs", type=int, default=1,
                   help="processes: each layout's clean run and the fault episodes in their own (default 1)")
    p.add_argument("--on-violation", choices=["log", "isolate"], default="log",
                   help="isolate: the clean runs must fail no request, and every fault episode must be isolated")
    args = p.parse_args()
    if args.jobs < 1:
        p.error(f"--jobs must be at least 1, got {args.jobs}")
    _threads(args.device)
    settings = SoakSettings(steps=args.steps, episodes=args.episodes, seed=args.seed, device=args.device,
                            backend=args.backend,
                            policy=ViolationPolicy(args.on_violation) if args.on_violation != "log" else None)
    layouts = [layout for layout in args.layouts.split(",") if layout]
    if args.jobs == 1:
        clean = [_clean(settings, layout) for layout in layouts]
        faults = _faults(settings) if args.episodes else []
    else:
        clean, faults = _parallel(settings, layouts, args.jobs)
    if args.out is not None:
        args.out.write_text(json.dumps({
            "settings": asdict(settings), "clean": [asdict(r) for r in clean],
            "faults": [{**asdict(r), "fault": r.fault.value, "lag": r.lag, "harmless": r.harmless,
                        "crashed": r.crashed, "ok": r.ok} for r in faults]}, indent=1) + "\n")
    bad = [r.layout for r in clean if not r.ok] + [r.fault.value for r in faults if not r.ok]
    done = "clean runs silent, every fault reported within its bound"
    if settings.policy is not None:
        done += ", no request of a clean run failed, every fault episode isolated"
    print("soak: " + (done if not bad else f"FAILED: {bad}"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

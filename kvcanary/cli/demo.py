"""``kvcanary demo``: its options, their checks, and the two engines' entry points (kvcanary's small engine,
:func:`kvcanary.demo.run_demo`; transformers' continuous batching, with ``--engine transformers``).

Exit status 0 when the clean run is silent and every fault is detected, 1 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import time

from kvcanary.cli.parser import UsageError, arguments
from kvcanary.demo.run import DEFAULT_STEPS

MIN_STEPS = 16


def _seed(text: str) -> int:
    """A workload seed: an integer in [0, 2**63 - 1] (what every engine's generator takes)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**63 - 1], got {value}")
    return value


def fault_names() -> tuple[list[str], list[str]]:
    """The fault classes of kvcanary's engine, and those of the transformers engine (some share a name)."""
    from kvcanary.demo.engine.faults import Fault
    from kvcanary.integrations.transformers.fault_kinds import TfFault

    return [f.value for f in Fault], [f.value for f in TfFault]


def _fault_help() -> str:
    ours, theirs = fault_names()
    both = [n for n in theirs if n in ours]
    return ("the fault class to inject after the clean run (default: all; none: the clean run only). "
            f"kvcanary engine: {', '.join(ours)}. "
            f"--engine transformers: {', '.join(theirs)}"
            + (f" ({' and '.join(both)} exist in both engines)" if both else ""))


@arguments("demo")
def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=["kvcanary", "transformers"], default="kvcanary",
                   help="kvcanary's small engine (default) or transformers' continuous batching (needs the "
                        "'transformers' extra)")
    p.add_argument("--fault", default="all", metavar="CLASS", help=_fault_help())
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS,
                   help=f"engine steps per run (default: {DEFAULT_STEPS}; at least {MIN_STEPS})")
    p.add_argument("--backend", default=None, help="force a kvcanary backend (default: automatic)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--seed", type=_seed, default=0, help="workload seed, 0 to 2**63 - 1 (default: 0)")
    p.add_argument("--compile", action="store_true",
                   help="run each forward's canary launches through torch.compile (fullgraph, dynamic shapes)")
    p.add_argument("--workers", type=int, choices=[1, 2], default=1,
                   help="2: also run the two-process rows (TP=2 and PD prefill->decode, gloo on the loopback; "
                        "default: 1)")
    p.add_argument("--on-violation", choices=["log", "isolate"], default="log",
                   help="isolate: fail the requests that read corrupt KV, quarantine its slots, and show per fault "
                        "the requests failed, the requests served (identical to the clean run or not) and the slots "
                        "quarantined (default: log, the detection table)")
    p.add_argument("--bundles", metavar="DIR", default=None,
                   help="write one evidence bundle per fault class into DIR instead (`kvcanary inspect`/`replay`)")
    p.add_argument("--serve", action="store_true",
                   help="with --engine transformers: serve over HTTP (transformers serve with canaries) and drive it "
                        "with a client; print what each client saw and the metrics that moved")


def check_fault(given: str, engine: str) -> None:
    """``given`` must be ``all``, ``none`` or a fault class of ``engine``; the error names the engine that has
    it, or the classes one typo away, never the whole list."""
    ours, theirs = fault_names()
    names, other, flag = (ours, theirs, "") if engine == "kvcanary" else (theirs, ours, " --engine transformers")
    if given in ("all", "none", *names):
        return
    if given in other:
        where = "transformers engine" if engine == "kvcanary" else "kvcanary engine"
        fix = "add --engine transformers" if engine == "kvcanary" else "drop --engine transformers"
        raise UsageError(f"--fault {given} is a fault class of the {where} only", hint=fix)
    near = difflib.get_close_matches(given, names, n=3, cutoff=0.6)
    raise UsageError(f"--fault {given} is not a fault class of the {engine} engine"
                     + (f"; did you mean {', '.join(near)}?" if near else ""),
                     hint=f"`kvcanary demo{flag} --help` lists them; all and none also work")


def check_steps(steps: int) -> None:
    """The demo engine's ``--steps``: at least :data:`MIN_STEPS`, or its faults never occur."""
    if steps < MIN_STEPS:
        raise UsageError(f"--steps must be >= {MIN_STEPS}, got {steps}",
                         hint="the workload's faults need that many steps to occur")


def require_transformers() -> None:
    """``--engine transformers`` needs transformers importable: one line with the install command otherwise."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UsageError("--engine transformers needs transformers installed",
                         hint="pip install 'kvcanary[transformers]'") from None


def _transformers(args: argparse.Namespace) -> int:
    """``--engine transformers``: option checks, then :func:`kvcanary.integrations.transformers.demo.run_demo`."""
    from kvcanary.cli.common import backend_usage_error, check_backend_name, usable_device
    from kvcanary.integrations.transformers.fault_kinds import TfFault
    from kvcanary.registry import BackendError

    for flag, given in (("--workers 2", args.workers == 2), ("--compile", args.compile)):
        if given:
            raise UsageError(f"{flag} is not available with --engine transformers",
                             hint="the transformers integration runs eagerly in one process; drop the option, "
                             "or use the default engine")
    check_fault(args.fault, "transformers")
    require_transformers()
    usable_device(args.device)
    check_backend_name(args.backend)
    faults = list(TfFault) if args.fault == "all" else [] if args.fault == "none" else [TfFault(args.fault)]
    if args.serve:  # over HTTP: kvcanary.serve
        from kvcanary.cli.serve import demo

        return demo(args, list(faults))
    if args.on_violation == "isolate":
        from kvcanary.integrations.transformers.isolate import main_isolate

        return main_isolate(faults, device=args.device, backend=args.backend, seed=args.seed,
                            max_new_tokens=max(8, args.steps // 2))
    from kvcanary.integrations.transformers.demo import run_demo

    start = time.perf_counter()
    try:
        outcomes = run_demo(faults, device=args.device, backend=args.backend, seed=args.seed,
                            max_new_tokens=max(8, args.steps // 2), out=sys.stdout)
    except BackendError as exc:
        raise backend_usage_error(exc, args.backend) from None
    bad = [o for o in outcomes if not o.ok]
    good = "clean run silent and token-identical" + (", every fault detected" if faults else "")
    print(f"\n{len(outcomes)} run(s) in {time.perf_counter() - start:.1f}s: "
          + (good if not bad else f"{len(bad)} run(s) FAILED"))
    return 1 if bad else 0


def main(args: argparse.Namespace) -> int:
    """Entry point of ``kvcanary demo``: 0 when the clean run is silent and every fault is detected.

    A bad option, a device torch cannot use or a backend that cannot serve is one line and exit status 2.
    """
    if args.bundles is not None:
        from kvcanary.cli.evidence import demo_bundles

        return demo_bundles(args)
    if args.engine == "transformers":
        return _transformers(args)
    from kvcanary.cli.common import backend_usage_error, check_backend_name, usable_device
    from kvcanary.demo.engine.faults import Fault
    from kvcanary.demo.run import DemoSettings, run_demo
    from kvcanary.registry import BackendError

    if args.serve:
        raise UsageError("--serve needs --engine transformers", hint="add --engine transformers")
    check_fault(args.fault, "kvcanary")
    if args.workers == 2 and args.compile:
        raise UsageError("--compile applies to the single-process runs only, not to --workers 2",
                         hint="drop one of the two options")
    check_steps(args.steps)
    usable_device(args.device)
    check_backend_name(args.backend)
    faults = list(Fault) if args.fault == "all" else [] if args.fault == "none" else [Fault(args.fault)]
    settings = DemoSettings(steps=args.steps, device=args.device, backend=args.backend, seed=args.seed,
                            compile=args.compile)
    if args.on_violation == "isolate":
        if args.workers == 2:
            raise UsageError("--workers 2 is not available with --on-violation isolate", hint="drop --workers 2")
        from kvcanary.demo.isolate import main_isolate

        return main_isolate(faults, settings)
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
        good += (" (extension-only classes: not visible to the default checks, as designed, and caught with "
                 "kvcanary.Extensions on)")
    print(f"\n{runs} run(s) in {time.perf_counter() - start:.1f}s: "
          + (good if not bad else f"{len(bad)} run(s) FAILED"))
    return 1 if bad else 0

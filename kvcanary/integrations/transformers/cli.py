"""``kvcanary demo --engine transformers``: option checks, then :func:`~.demo.run_demo`."""

from __future__ import annotations

import argparse
import sys
import time

from kvcanary.cli import UsageError
from kvcanary.integrations.transformers.fault_kinds import TfFault


def main(args: argparse.Namespace) -> int:
    """0 when the clean run is silent (and token-identical) and every fault is detected; 2 on a usage error."""
    from kvcanary.cli_commands import backend_usage_error, check_backend_name, usable_device
    from kvcanary.registry import BackendError

    names = {f.value for f in TfFault}
    if args.fault not in ("all", "none") and args.fault not in names:
        raise UsageError(f"--fault {args.fault} is not a transformers fault class",
                         hint=f"one of all, none, {', '.join(sorted(names))}")
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise UsageError("--engine transformers needs transformers installed",
                         hint="pip install 'kvcanary[transformers]'") from None
    usable_device(args.device)
    check_backend_name(args.backend)
    faults = list(TfFault) if args.fault == "all" else [] if args.fault == "none" else [TfFault(args.fault)]
    if getattr(args, "serve", False):  # over HTTP: kvcanary.serve
        from kvcanary.serve.cli import demo

        return demo(args, list(faults))
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

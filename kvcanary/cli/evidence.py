"""``kvcanary inspect BUNDLE [--html OUT]`` and ``kvcanary replay BUNDLE``, and the ``demo --bundles`` run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvcanary.cli.parser import UsageError, arguments


@arguments("inspect")
def _inspect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", help="a bundle folder (as BundleSink or `kvcanary demo --bundles` writes it)")
    p.add_argument("--html", metavar="OUT", default=None, help="also write one self-contained HTML page to OUT")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = INSPECT_EXIT


def _load(path: str) -> object:
    """The bundle at ``path``; a UsageError (one line, exit status 2) when it is not one this kvcanary reads.
    A bundle without digests (an older writer's) is read, with a note that damage to it goes unnoticed."""
    from kvcanary.evidence.digests import DIGESTS_KEY
    from kvcanary.evidence.format import META_FILE, BundleError, read_bundle

    try:
        bundle = read_bundle(path)
    except BundleError as exc:
        found = (Path(path) / META_FILE).is_file()  # a bundle that is damaged, not one that is missing
        raise UsageError(str(exc).removeprefix("kv-canary: "),
                         hint="the bundle is damaged or not of this version: write it again" if found else
                         "pass the folder that holds bundle.json") from None
    if DIGESTS_KEY not in bundle.meta:
        print(f"note: this bundle has no {DIGESTS_KEY} (an older kvcanary wrote it): damage to it cannot be "
              "detected")
    return bundle


def inspect(args: argparse.Namespace) -> int:
    """Print the bundle's report; with ``--html``, write the page too."""
    from kvcanary.evidence.format import Bundle
    from kvcanary.evidence.report import html_report, text_report

    bundle = _load(args.bundle)
    assert isinstance(bundle, Bundle)
    sys.stdout.write(text_report(bundle))
    if args.html is not None:
        out = Path(args.html)
        if out.is_dir():
            raise UsageError(f"--html {args.html} is a folder", hint="give the path of the page to write")
        page = html_report(bundle)
        try:
            out.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--html {args.html} cannot be written ({exc.strerror or exc})",
                             hint="give a path in a folder that exists and that you may write") from None
        print(f"wrote {out}")
    return 0


REPLAY_EXIT = """exit status:
  0  reproduced: the replay gives the bundled violation rows (rows listed as not replayable aside)
  1  NOT reproduced: a bundled row is missing or an extra row comes out, or no row could be replayed
  2  not a bundle this kvcanary reads (no bundle.json, damaged, oversized, newer, or breaking a rule of
     its format; one line naming the file and the rule), or a usage error"""

INSPECT_EXIT = """exit status:
  0  the report was printed (and the page written)
  2  not a bundle this kvcanary reads (as for `kvcanary replay`), or --html OUT cannot be written"""


@arguments("replay")
def _replay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", help="a bundle folder")
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = REPLAY_EXIT


def replay(args: argparse.Namespace) -> int:
    """Re-run the bundle's checks on the CPU (torch_ref); 0 when the rows are reproduced, 1 otherwise."""
    from kvcanary.evidence.format import Bundle
    from kvcanary.evidence.rerun import replay as run_replay

    bundle = _load(args.bundle)
    assert isinstance(bundle, Bundle)
    result = run_replay(bundle)
    print(f"replayed {len(result.replayed)} row(s) for {len(result.expected)} bundled row(s) on torch_ref")
    for reason in result.unreplayable:
        print(f"  not replayable: {reason}")
    for row in result.missing:
        print(f"  missing (bundled, not reproduced): {list(row)}")
    for row in result.extra:
        print(f"  extra (reproduced, not bundled): {list(row)}")
    if result.ok:
        print("reproduced: the same violation rows" + ("" if result.complete else
              f" ({len(result.unreplayable)} bundled row(s) without the evidence to replay, listed above)"))
    else:
        print("NOT reproduced")
    return 0 if result.ok else 1


_NOT_WITH_BUNDLES: tuple[tuple[str, object, str, str], ...] = (
    ("compile", True, "--compile", "bundles come from eager runs (compiled launches record the same rows); "
     "drop --compile, or drop --bundles to time the compiled demo"),
    ("workers", 2, "--workers 2", "the two-process rows write no bundles; drop --workers 2"),
    ("on_violation", "isolate", "--on-violation isolate", "bundles come from runs under the log policy (the "
     "isolate guard feeds the slot journals its own way); drop --on-violation isolate, or drop --bundles"),
    ("serve", True, "--serve", "bundles come from in-process runs, not over HTTP; drop --serve, or drop --bundles"),
)
"""Demo options a bundle run cannot honour: the attribute, the value that asks for it, the option as written
and the hint."""


def _check_bundle_options(args: argparse.Namespace) -> None:
    """Refuse, before anything runs, what ``demo --bundles`` cannot honour; check the rest as the plain demo
    does (the fault class, ``--steps``, the device, the backend's name)."""
    from kvcanary.cli.common import check_backend_name, usable_device
    from kvcanary.cli.demo import check_fault, check_steps, require_transformers

    out = Path(args.bundles)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--bundles {args.bundles} is not a folder", hint="give a folder to write the bundles into")
    for attr, value, flag, hint in _NOT_WITH_BUNDLES:
        if getattr(args, attr) == value:
            raise UsageError(f"{flag} is not available with --bundles", hint=hint)
    if args.fault == "none":
        raise UsageError("--bundles needs a fault class (--fault all or one class), not none",
                         hint="a clean run writes no bundle")
    check_fault(args.fault, args.engine)
    if args.engine == "transformers":
        require_transformers()
    else:
        check_steps(args.steps)
    usable_device(args.device)
    check_backend_name(args.backend)


def demo_bundles(args: argparse.Namespace) -> int:
    """``kvcanary demo --bundles DIR``: one bundle per fault class; 1 if one is missing or misattributed.

    The runs honour ``--engine``, ``--fault``, ``--steps``, ``--seed``, ``--device`` and ``--backend``; the
    options in :data:`_NOT_WITH_BUNDLES` are refused. A bad option, device or backend is one line and exit
    status 2, before anything runs; so is a bundle that cannot be kept (the sink's write errors, the path).
    """
    from kvcanary.cli.common import backend_usage_error
    from kvcanary.evidence.format import read_bundle
    from kvcanary.evidence.pick import KeepError
    from kvcanary.registry import BackendError

    _check_bundle_options(args)
    out, fault = Path(args.bundles), args.fault
    run = {"seed": args.seed, "device": args.device, "backend": args.backend}
    if args.engine == "transformers":
        from kvcanary.evidence.demo_transformers import EXPECTED_TF_CLASS, write_tf_bundles
        from kvcanary.integrations.transformers.fault_kinds import TfFault

        tf_faults = list(TfFault) if fault == "all" else [TfFault(fault)]
        expected = {f"transformers-{f.value}": EXPECTED_TF_CLASS[f].value for f in tf_faults}
    else:
        from kvcanary.demo.engine.faults import Fault
        from kvcanary.evidence.demo_bundles import EXPECTED_CLASS, write_demo_bundles

        faults = list(Fault) if fault == "all" else [Fault(fault)]
        expected = {f"demo-{f.value}": EXPECTED_CLASS[f].value for f in faults}
    for name in expected:
        if (out / name).exists() and not (out / name).is_dir():
            raise UsageError(f"--bundles {args.bundles}: {out / name} is a file, where the {name} bundle goes",
                             hint="remove it, or give another folder")
    try:
        if args.engine == "transformers":
            paths = write_tf_bundles(out, tf_faults, max_new_tokens=max(8, args.steps // 2), **run)
        else:
            paths = write_demo_bundles(out, faults, steps=args.steps, **run)
    except BackendError as exc:
        raise backend_usage_error(exc, args.backend) from None
    except KeepError as exc:
        raise UsageError(f"--bundles {args.bundles}: cannot keep the bundle {exc.path}: {exc.reason}",
                         hint="remove what is at that path, or give another folder with free space") from None
    bad = 0
    got = {p.name: p for p in paths}
    for name, want in expected.items():
        p = got.get(name)
        if p is None:
            print(f"{name:<40} no bundle (nothing fired)")
            bad += 1
            continue
        cls = read_bundle(p).bug_class
        ok = cls == want
        bad += not ok
        print(f"{name:<40} {cls.replace('_', ' '):<22} {'ok' if ok else 'expected ' + want.replace('_', ' ')}"
              f"  {p}")
    return 1 if bad else 0

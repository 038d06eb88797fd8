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


def _load(path: str) -> object:
    from kvcanary.evidence.format import BundleError, read_bundle

    try:
        return read_bundle(path)
    except BundleError as exc:
        raise UsageError(str(exc).removeprefix("kv-canary: "),
                         hint="pass the folder that holds bundle.json") from None


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


@arguments("replay")
def _replay_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("bundle", help="a bundle folder")


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


def demo_bundles(out_dir: str, engine: str, fault: str, steps: int, seed: int) -> int:
    """``kvcanary demo --bundles DIR``: one bundle per fault class; 1 if one is missing or misattributed."""
    from kvcanary.evidence.format import read_bundle

    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--bundles {out_dir} is not a folder", hint="give a folder to write the bundles into")
    if fault == "none":
        raise UsageError("--bundles needs a fault class (--fault all or one class), not none",
                         hint="a clean run writes no bundle")
    expected: dict[str, str]
    if engine == "transformers":
        from kvcanary.evidence.demo_transformers import EXPECTED_TF_CLASS, write_tf_bundles
        from kvcanary.integrations.transformers.fault_kinds import TfFault

        if fault != "all" and fault not in {f.value for f in TfFault}:
            raise UsageError(f"--fault {fault} is not a fault class of the transformers engine",
                             hint=f"use one of all, {', '.join(f.value for f in TfFault)}")
        tf_faults = list(TfFault) if fault == "all" else [TfFault(fault)]
        paths = write_tf_bundles(out, tf_faults, seed=seed)
        expected = {f"transformers-{f.value}": EXPECTED_TF_CLASS[f].value for f in tf_faults}
    else:
        from kvcanary.demo.engine.faults import Fault
        from kvcanary.evidence.demo_bundles import EXPECTED_CLASS, write_demo_bundles

        if fault != "all" and fault not in {f.value for f in Fault}:
            raise UsageError(f"--fault {fault} is a fault class of the transformers engine only",
                             hint=f"add --engine transformers, or use one of all, {', '.join(f.value for f in Fault)}")
        faults = list(Fault) if fault == "all" else [Fault(fault)]
        paths = write_demo_bundles(out, faults, steps=steps, seed=seed)
        expected = {f"demo-{f.value}": EXPECTED_CLASS[f].value for f in faults}
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

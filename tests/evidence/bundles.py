"""Demo-engine bundles shared by the evidence tests: one real run per fault class, made once per session."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence import Bundle, read_bundle
from kvcanary.evidence.demo_bundles import run_fault_bundle

_DIR = Path(tempfile.mkdtemp(prefix="kvcanary-test-bundles-"))


@functools.cache
def bundle_path(fault: Fault) -> Path:
    """The bundle ``kvcanary demo --bundles`` writes for ``fault`` (the demo's run, 40 steps)."""
    path = run_fault_bundle(fault, _DIR)
    assert path is not None, f"{fault.value}: the run wrote no bundle (nothing fired)"
    return path


def bundle(fault: Fault) -> Bundle:
    return read_bundle(bundle_path(fault))


@functools.cache
def owner_bundle_path(fault: Fault) -> Path:
    """The bundle of ``fault``'s run with the write-time owner check on as well (its own folder)."""
    path = run_fault_bundle(fault, _DIR / "owner-check", owner_check=True)
    assert path is not None, f"{fault.value}: the run with the owner check wrote no bundle (nothing fired)"
    return path

"""Demo-engine bundles shared by the evidence tests: one real run per fault class, made once per session."""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence import Bundle, read_bundle
from kvcanary.evidence.demo_bundles import run_fault_bundle
from kvcanary.evidence.digests import DIGESTS_KEY, file_digest, meta_digest
from kvcanary.evidence.format import META_FILE, TENSORS_FILE

_DIR = Path(tempfile.mkdtemp(prefix="kvcanary-test-bundles-"))


@functools.cache
def bundle_path(fault: Fault) -> Path:
    """The bundle ``kvcanary demo --bundles`` writes for ``fault`` (the demo's run, 40 steps)."""
    path = run_fault_bundle(fault, _DIR)
    assert path is not None, f"{fault.value}: the run wrote no bundle (nothing fired)"
    return path


def edit_meta(path: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    """Change the bundle's ``bundle.json`` by ``edit`` and stamp its meta digest again, as someone who edits a
    bundle on purpose would: the edit then meets the schema's rules, not the damage check."""
    meta = json.loads((path / META_FILE).read_text())
    edit(meta)
    if isinstance(meta.get(DIGESTS_KEY), dict):
        meta[DIGESTS_KEY]["meta"] = meta_digest(meta)
    (path / META_FILE).write_text(json.dumps(meta))


def reseal_tensors(path: Path) -> None:
    """Stamp the digest of the bundle's (changed) tensors file again, and so the meta digest too."""
    digest = file_digest(path / TENSORS_FILE)
    edit_meta(path, lambda m: m[DIGESTS_KEY].__setitem__("tensors", digest))


def bundle(fault: Fault) -> Bundle:
    return read_bundle(bundle_path(fault))


@functools.cache
def owner_bundle_path(fault: Fault) -> Path:
    """The bundle of ``fault``'s run with the write-time owner check on as well (its own folder)."""
    path = run_fault_bundle(fault, _DIR / "owner-check", owner_check=True)
    assert path is not None, f"{fault.value}: the run with the owner check wrote no bundle (nothing fired)"
    return path

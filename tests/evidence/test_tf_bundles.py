"""Every transformers fault class yields a bundle (``kvcanary demo --engine transformers --bundles``) whose
report names the injected fault's bug class and which replays; a handed-twice block names both requests."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

import pytest

from kvcanary.evidence import Bundle, read_bundle, replay
from kvcanary.evidence.demo_transformers import EXPECTED_TF_CLASS, run_tf_fault_bundle
from kvcanary.integrations.transformers.fault_kinds import NEEDS_SLIDING_WINDOW, TfFault

_DIR = Path(tempfile.mkdtemp(prefix="kvcanary-test-tf-bundles-"))


@functools.cache
def _bundle(fault: TfFault) -> Bundle:
    import transformers

    from kvcanary.integrations.transformers.version import sliding_supported

    if fault in NEEDS_SLIDING_WINDOW and not sliding_supported(transformers.__version__):
        pytest.skip(f"transformers {transformers.__version__} has no sliding-window layout for {fault.value}")
    path = run_tf_fault_bundle(fault, _DIR)
    assert path is not None, f"{fault.value}: the run wrote no bundle"
    return read_bundle(path)


@pytest.mark.parametrize("fault", list(TfFault), ids=lambda f: f.value)
def test_the_bundles_bug_class_is_the_injected_fault_and_it_replays(fault: TfFault) -> None:
    b = _bundle(fault)
    assert b.bug_class == EXPECTED_TF_CLASS[fault].value, b.meta["attribution"]
    result = replay(b)
    assert result.ok, (result.missing, result.extra, result.unreplayable)
    assert "transformers" in b.meta["engine"]


def test_a_block_handed_twice_names_both_requests() -> None:
    a = _bundle(TfFault.BLOCK_HANDED_TWICE).meta["attribution"]
    requests = {o for o in (a["writer"], *a["holders"]) if o and o.startswith("request:")}
    assert len(requests) >= 2, a
    assert "still held it" in a["reason"]

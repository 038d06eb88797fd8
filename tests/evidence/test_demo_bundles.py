"""Every demo-engine fault class yields a bundle whose report names the injected fault's bug class, whose
attribution names the owners for the ownership faults, and which replays on torch_ref from the bundle alone."""

from __future__ import annotations

import pytest

from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence import BUNDLE_VERSION, replay
from kvcanary.evidence.demo_bundles import EXPECTED_CLASS
from tests.evidence.bundles import bundle


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
def test_the_bundles_bug_class_is_the_injected_fault(fault: Fault) -> None:
    b = bundle(fault)
    assert b.bug_class == EXPECTED_CLASS[fault].value, b.meta["attribution"]


@pytest.mark.parametrize("fault", list(Fault), ids=lambda f: f.value)
def test_every_demo_bundle_replays(fault: Fault) -> None:
    result = replay(bundle(fault))
    assert result.ok, (result.missing, result.extra, result.unreplayable)
    assert len(result.expected) >= 1


def test_double_allocation_names_both_requests() -> None:
    a = bundle(Fault.DOUBLE_ALLOC).meta["attribution"]
    owners = {a["writer"], *a["holders"]}
    requests = {o for o in owners if o and o.startswith("request:")}
    assert len(requests) >= 2, a
    assert "freed twice" in a["reason"] or "still held it" in a["reason"]


def test_use_after_free_names_the_cache_entry_and_the_new_owner() -> None:
    a = bundle(Fault.RADIX_UAF).meta["attribution"]
    assert "cache:radix" in a["holders"], a
    assert any(h.startswith("request:") for h in (a["writer"], *a["holders"]) if h), a
    assert "freed while cache:radix still held it" in a["reason"]


def test_a_misdirected_write_names_the_writer_the_holder_and_both_slots() -> None:
    m = bundle(Fault.WRONG_CACHE_LOC).meta
    a = m["attribution"]
    assert a["writer"] and a["writer"].startswith("request:")
    assert any(h.startswith("request:") and h != a["writer"] for h in a["holders"]), a
    assert a["actual_slot"] == m["slot"]
    assert a["intended_slot"] is not None and a["intended_slot"] != m["slot"]
    writer = a["writer"].split(":", 1)[1]
    view = next(o for o in m["owners"] if o["request_id"] == writer)
    pos = a["written_positions"][0]
    assert view["slots"][view["positions"].index(pos)] == a["intended_slot"]


def test_a_bundle_holds_the_evidence_fields() -> None:
    m = bundle(Fault.RADIX_UAF).meta
    assert m["format"] == "kvcanary-evidence-bundle" and m["version"] == BUNDLE_VERSION
    assert m["kvcanary_version"] and "demo engine" in m["engine"]
    row = m["rows"][0]
    assert row["fail_reasons"] and row["codes"] and len(row["fields"]) == 8
    assert row["fields"][1] == m["slot"]
    rec = m["records"][0]
    assert rec["stored"]["token"] == row["fields"][3] and rec["stored"]["position"] == row["fields"][2]
    assert m["journal"] and all(e["block"] == m["slot"] for e in m["journal"])
    assert m["owners"] and all(len(o["slots"]) == len(o["tokens"]) for o in m["owners"])
    assert m["replay"]["verify"] or m["replay"]["write"]

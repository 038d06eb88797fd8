"""Bundles of the write-time owner check's rows: they carry what the check read (the writer's row, the owner
map's entry for the slot) and replay on torch_ref from the bundle alone, reproducing the same rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvcanary.cli import main
from kvcanary.consts import FailReason
from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence import BUNDLE_VERSION, read_bundle, replay
from kvcanary.evidence.demo_bundles import EXPECTED_CLASS
from kvcanary.evidence.format import META_FILE
from kvcanary.evidence.report import text_report
from tests.evidence.bundles import edit_meta, owner_bundle_path

OWNER = int(FailReason.WRITE_SLOT_OWNER_MISMATCH)


def test_a_double_allocation_bundle_with_the_owner_check_replays() -> None:
    b = read_bundle(owner_bundle_path(Fault.DOUBLE_ALLOC))
    m = b.meta
    assert m["version"] == BUNDLE_VERSION
    owner_rows = [r for r in m["rows"] if r["fields"][7] & OWNER]
    assert owner_rows, f"the bundle holds no owner-check row: {[r['fail_reasons'] for r in m['rows']]}"
    rp = m["replay"]
    assert rp["extensions"]["write_slot_owner_mismatch"] is True
    owned = [w for w in rp["write"] if w["owner"] is not None]
    assert owned, rp
    for w in owned:
        for i in w["rows"]:
            fields = m["rows"][i]["fields"]
            if fields[7] & OWNER:  # what the check read: the writer (expected_token), the map's entry (expected_aux)
                assert w["owner"] == {"writer": fields[4], "slot_owner": fields[6]}
                assert fields[4] != fields[6] and fields[4] > 0
    result = replay(b)
    assert result.ok and result.complete, (result.missing, result.extra, result.unreplayable)
    assert [r for r in result.replayed if r[7] & OWNER], "the replay produced no owner-check row"
    assert b.bug_class == EXPECTED_CLASS[Fault.DOUBLE_ALLOC].value, m["attribution"]


def test_the_owner_record_names_writer_and_holder() -> None:
    b = read_bundle(owner_bundle_path(Fault.DOUBLE_ALLOC))
    recs = [r for r in b.meta["records"] if r["expected"].get("owner")]
    assert recs
    owner = recs[0]["expected"]["owner"]
    assert recs[0]["expected"]["token"] is None  # an owner row's expected_token is the writer, not a token
    assert isinstance(owner["slot_owner_at_capture"], int)
    report = text_report(b)
    assert f"req_pool_idx={owner['writer']}" in report and "held by " in report


def _edited(tmp_path: Path, slot_owner_of: str) -> Path:
    src = owner_bundle_path(Fault.DOUBLE_ALLOC)
    copy = tmp_path / "edited"
    shutil.copytree(src, copy)

    def give_slot(meta: dict[str, Any]) -> None:
        for w in meta["replay"]["write"]:
            if w["owner"] is not None:
                w["owner"]["slot_owner"] = w["owner"][slot_owner_of]

    edit_meta(copy, give_slot)
    return copy


def test_the_replay_reads_the_bundled_owner_map_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The owner rows come from the bundled map entry: the same bundle with the slot given to its writer does
    not replay (its owner rows are missing), and ``kvcanary replay`` says so."""
    assert main(["replay", str(owner_bundle_path(Fault.DOUBLE_ALLOC))]) == 0
    assert "reproduced" in capsys.readouterr().out
    edited = _edited(tmp_path, "writer")
    result = replay(read_bundle(edited))
    assert not result.ok and result.missing and all(r[7] & OWNER for r in result.missing)
    assert main(["replay", str(edited)]) == 1


def test_a_version_1_bundle_still_reads(tmp_path: Path) -> None:
    src = owner_bundle_path(Fault.DOUBLE_ALLOC)
    copy = tmp_path / "v1"
    shutil.copytree(src, copy)
    meta = json.loads((copy / META_FILE).read_text())
    meta["version"] = 1
    del meta["digests"]  # version 1 bundles were written without digests
    (copy / META_FILE).write_text(json.dumps(meta))
    assert read_bundle(copy).meta["version"] == 1

"""The bundle format (round trip, refusals) and the ``inspect`` / ``replay`` commands on a real bundle."""

from __future__ import annotations

import copy
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from kvcanary.cli import main
from kvcanary.consts import RealKvHashMode
from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence import BUNDLE_VERSION, Bundle, BundleError, read_bundle, replay, write_bundle
from kvcanary.evidence.format import META_FILE
from kvcanary.hashing import real_kv_hash, to_int64
from tests.evidence.bundles import bundle_path


def test_a_bundle_round_trips(tmp_path: Path) -> None:
    b = read_bundle(bundle_path(Fault.DOUBLE_ALLOC))
    write_bundle(Bundle({**b.meta, "slot": 3}, b.tensors), tmp_path / "b")
    back = read_bundle(tmp_path / "b")
    assert back.meta["slot"] == 3 and back.meta["version"] == BUNDLE_VERSION
    assert back.tensors.keys() == b.tensors.keys()
    assert all(torch.equal(back.tensors[k], t) for k, t in b.tensors.items())


@pytest.mark.parametrize(("edit", "field"), [
    (lambda m, t: m.pop("rows"), "rows is missing"),
    (lambda m, t: m.__setitem__("version", True), None),  # write_bundle stamps its own version
    (lambda m, t: m["replay"]["verify"][0].__setitem__("row", 7), "replay.verify[0].row must be an index"),
    (lambda m, t: t.pop(next(k for k in t if k.startswith("records/"))), "must match the tensor records/"),
], ids=["a field missing", "a stale version", "a row past the rows", "a tensor missing"])
def test_writing_refuses_meta_a_reader_refuses(edit: Callable[[dict[str, Any], dict[str, torch.Tensor]], object],
                                               field: str | None, tmp_path: Path) -> None:
    b = read_bundle(bundle_path(Fault.RADIX_UAF))
    meta, tensors = copy.deepcopy(b.meta), dict(b.tensors)
    edit(meta, tensors)
    if field is None:
        write_bundle(Bundle(meta, tensors), tmp_path / "b")
        assert read_bundle(tmp_path / "b").meta["version"] == BUNDLE_VERSION
        return
    with pytest.raises(BundleError, match=re.escape(field)):
        write_bundle(Bundle(meta, tensors), tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_reading_refuses_what_is_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=re.escape("must be a folder holding bundle.json")):
        read_bundle(tmp_path / "missing")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / META_FILE).write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        read_bundle(tmp_path / "x")
    (tmp_path / "x" / META_FILE).write_text(json.dumps({"format": "other", "version": 1}))
    with pytest.raises(BundleError, match="format must be 'kvcanary-evidence-bundle'"):
        read_bundle(tmp_path / "x")
    (tmp_path / "x" / META_FILE).write_text(json.dumps({"format": "kvcanary-evidence-bundle", "version": 99}))
    with pytest.raises(BundleError, match=re.escape(f"version must be 1..{BUNDLE_VERSION}")):
        read_bundle(tmp_path / "x")


def test_a_tampered_record_does_not_replay(tmp_path: Path) -> None:
    src = bundle_path(Fault.WRONG_CACHE_LOC)
    assert replay(read_bundle(src)).ok
    b = read_bundle(src)
    name = next(k for k in b.tensors if k.startswith("records/"))
    b.tensors[name] = b.tensors[name].clone()
    b.tensors[name][0, 1] += 1  # the violated slot's stored position
    result = replay(b)  # in memory: the replay itself sees the change
    assert not result.ok and result.missing and result.extra
    with pytest.raises(BundleError, match=re.escape("records[0].stored must be the record the replay reads")):
        write_bundle(b, tmp_path / "t")  # and no bundle says one record while its tensors hold another
    assert not (tmp_path / "t").exists()


def test_inspect_prints_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    path = bundle_path(Fault.DOUBLE_ALLOC)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Most likely bug class: double allocation" in out
    assert "Expected vs found:" in out and "<-- differs" in out
    assert "Journal of block" in out and "allocated" in out
    assert "last writer: request:" in out


def test_inspect_html_writes_one_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "page.html"
    assert main(["inspect", str(bundle_path(Fault.RADIX_UAF)), "--html", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    assert "http://" not in page and "https://" not in page  # nothing external


def test_replay_command_reproduces_and_fails_on_a_tampered_bundle(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = bundle_path(Fault.KV_FLIP_USED)
    assert main(["replay", str(path)]) == 0
    assert "reproduced: the same violation rows" in capsys.readouterr().out
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    b = read_bundle(copy)
    kv = next(k for k in b.tensors if k.startswith("kv/"))
    tag = kv.split("/")[1]
    # stamp the fingerprint of the bytes the bundle holds: the record now matches its KV, so no row comes out
    fixed = to_int64(real_kv_hash([bytes(b.tensors[kv][0].tolist())], RealKvHashMode.PARTIAL))
    b.tensors[f"records/{tag}"] = b.tensors[f"records/{tag}"].clone()
    b.tensors[f"records/{tag}"][0, 3] = fixed
    for rec in b.meta["records"]:  # and its copy in the report (else the bundle is refused as inconsistent)
        if rec["tag"] == tag and rec["slot"] == b.meta["replay"]["buffers"][tag]["slots"][0]:
            rec["stored"]["real_kv_hash"] = f"{fixed & ((1 << 64) - 1):#018x}"
    write_bundle(b, copy)
    assert main(["replay", str(copy)]) == 1
    assert "NOT reproduced" in capsys.readouterr().out


def test_a_bad_bundle_path_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "must be a folder holding bundle.json" in err


def test_demo_bundles_writes_one_folder_per_fault_directly_under_dir(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--bundles", str(tmp_path), "--fault", "position_off_by_one"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["demo-position_off_by_one"]
    assert "position error" in capsys.readouterr().out
    assert main(["replay", str(tmp_path / "demo-position_off_by_one")]) == 0


def test_demo_bundles_refuses_a_clean_run_and_another_engines_fault(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--bundles", str(tmp_path), "--fault", "none"]) == 2
    assert "--bundles needs a fault class" in capsys.readouterr().err
    assert main(["demo", "--bundles", str(tmp_path), "--fault", "block_handed_twice"]) == 2
    assert "transformers engine only" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_replay_help_states_its_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["replay", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines()]
    assert "exit status:" in lines
    for code, words in (("0", "reproduced"), ("1", "NOT reproduced"), ("2", "not a bundle")):
        assert any(line.startswith(f"{code}  {words}") for line in lines), out


def test_inspect_notes_a_bundle_without_digests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "old"
    shutil.copytree(bundle_path(Fault.DOUBLE_ALLOC), path)
    assert main(["inspect", str(path)]) == 0
    assert "no digests" not in capsys.readouterr().out
    meta = json.loads((path / META_FILE).read_text())
    del meta["digests"]
    (path / META_FILE).write_text(json.dumps(meta))
    assert main(["inspect", str(path)]) == 0
    assert capsys.readouterr().out.startswith("note: this bundle has no digests")

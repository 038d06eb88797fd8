"""Bundles that are damaged, truncated or hostile: ``inspect`` and ``replay`` answer with one line naming the
field and the rule (exit status 2), never a traceback, and the page escapes every string the bundle holds."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvcanary.cli import main
from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence import read_bundle
from kvcanary.evidence.format import META_FILE, TENSORS_FILE
from kvcanary.evidence.report import html_report
from tests.evidence.bundles import bundle_path, edit_meta

Edit = Callable[[dict[str, Any]], None]


def _copy(tmp_path: Path, edit: Edit | None = None) -> Path:
    """A copy of a real bundle, its ``bundle.json`` changed by ``edit``."""
    dst = tmp_path / "b"
    shutil.copytree(bundle_path(Fault.RADIX_UAF), dst)
    if edit is not None:
        edit_meta(dst, edit)  # its digest stamped again: the edit meets the schema, not the damage check
    return dst


def _one_line_error(command: str, path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main([command, str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def _set(*keys: str | int, value: object) -> Edit:
    def edit(meta: dict[str, Any]) -> None:
        obj: Any = meta
        for k in keys[:-1]:
            obj = obj[k]
        obj[keys[-1]] = value
    return edit


def _drop(key: str) -> Edit:
    return lambda meta: meta.pop(key)


HOSTILE: dict[str, tuple[Edit, str]] = {
    "rows missing": (_drop("rows"), "rows"),
    "replay missing": (_drop("replay"), "replay"),
    "attribution missing": (_drop("attribution"), "attribution"),
    "rows not a list": (_set("rows", value="x"), "rows"),
    "slot not an integer": (_set("slot", value="abc"), "slot"),
    "journal null": (_set("journal", value=None), "journal"),
    "unknown real-KV mode": (_set("replay", "real_kv_mode", value="BOGUS"), "real_kv_mode"),
    "unknown launch tag": (_set("replay", "verify", 0, "tag", value="NOPE"), "tag"),
    "verify row past the rows": (_set("replay", "verify", 0, "row", value=99), "row"),
    "slot not in the buffers": (_set("replay", "verify", 0, "slot", value=12345), "slot"),
    "source bytes of a terabyte": (_set("replay", "buffers", "HEAD_K_FULL", "source_bytes", value=[10**12]),
                                   "source_bytes"),
    "version true": (_set("version", value=True), "version"),
    "fields not eight": (_set("rows", 0, "fields", value=[1, 2]), "rows[0].fields"),
    "owner slots not one per position": (_set("owners", 0, "slots", value=[5]), "owners[0].slots"),
    "buffer slots not in the tensors": (lambda m: m["replay"]["buffers"]["HEAD_K_FULL"]["slots"].append(3),
                                        "replay.buffers.HEAD_K_FULL.slots"),
}


@pytest.mark.parametrize("command", ["inspect", "replay"])
@pytest.mark.parametrize("case", list(HOSTILE), ids=str)
def test_a_damaged_field_is_one_line_naming_it(case: str, command: str, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    edit, field = HOSTILE[case]
    line = _one_line_error(command, _copy(tmp_path, edit), capsys)
    assert field in line, line
    assert "hint: the bundle is damaged" in line, line  # not "pass the folder": the folder was right


@pytest.mark.parametrize("command", ["inspect", "replay"])
def test_a_folder_without_a_bundle_is_told_to_pass_the_bundles_folder(command: str, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    line = _one_line_error(command, tmp_path, capsys)
    assert "hint: pass the folder that holds bundle.json" in line, line


def test_a_write_slot_table_too_large_to_build_is_one_line(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    dst = tmp_path / "b"
    shutil.copytree(bundle_path(Fault.DRAFT_PAST_ALLOCATION), dst)
    assert json.loads((dst / META_FILE).read_text())["replay"]["extensions"]["write_slot_mismatch"]
    edit_meta(dst, _set("replay", "write", 0, "position", value=10**15))  # req_to_token would be 4 PB
    assert "replay.write[0].position" in _one_line_error("replay", dst, capsys)


@pytest.mark.parametrize("command", ["inspect", "replay"])
@pytest.mark.parametrize("damage", [b"", b"\x00" * 7, b"\xff" * 64], ids=["empty", "short header", "garbage"])
def test_a_damaged_tensors_file_is_one_line(damage: bytes, command: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(tmp_path)
    (path / TENSORS_FILE).write_bytes(damage)
    assert TENSORS_FILE in _one_line_error(command, path, capsys)


def test_a_truncated_tensors_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(tmp_path)
    data = (path / TENSORS_FILE).read_bytes()
    (path / TENSORS_FILE).write_bytes(data[: len(data) - 8])
    assert TENSORS_FILE in _one_line_error("replay", path, capsys)


@pytest.mark.parametrize("text", [b"\xff\xfe{}", b"[" * 100_000], ids=["not utf-8", "nested too deep"])
def test_a_bundle_json_that_does_not_decode_is_one_line(text: bytes, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(tmp_path)
    (path / META_FILE).write_bytes(text)
    assert "not valid JSON" in _one_line_error("inspect", path, capsys)


def test_the_page_escapes_the_owners_positions(tmp_path: Path) -> None:
    evil = '"><script>alert(1)</script>'
    b = read_bundle(bundle_path(Fault.DOUBLE_ALLOC))
    owner = b.meta["owners"][0]
    owner["positions"], owner["slots"] = [evil], [b.meta["slot"]]
    page = html_report(b)
    assert "<script>" not in page


_EVIL = "evil\x1b[2J\x1b]0;owned\x07\nline\u202e"


def _evil_strings(meta: dict[str, Any]) -> None:
    meta["engine"] = meta["attribution"]["reason"] = meta["owners"][0]["request_id"] = _EVIL
    meta["attribution"]["holders"] = [_EVIL]
    row = meta["replay"]["verify"].pop()["row"]  # a row the bundle cannot replay, and says why
    meta["replay"]["unreplayable"] = [f"row {row}: {_EVIL}"]


def test_inspect_escapes_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(_copy(tmp_path))]) == 0
    clean = capsys.readouterr().out
    path = _copy(tmp_path / "evil", _evil_strings)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\u202e"), "a control character reached the terminal"
    assert out.count("\n") == clean.count("\n") + 1  # one more line: the unreplayable reason; none split
    assert "evil\\x1b[2J\\x1b]0;owned\\x07\\nline\\u202e" in out


def test_replay_escapes_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _copy(tmp_path, _evil_strings)
    assert main(["replay", str(path)]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\u202e"), "a control character reached the terminal"
    assert re.search(r"not replayable: row \d+: evil\\x1b\[2J", out), out


def test_html_into_a_missing_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "no" / "page.html"
    assert main(["inspect", str(bundle_path(Fault.RADIX_UAF)), "--html", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--html" in err[0], err
    assert not out.parent.exists()


@pytest.mark.parametrize("fault", [Fault.STALE_SWA_TRANSLATION, Fault.KV_FLIP_USED], ids=str)
def test_rows_over_the_byte_limit_are_listed_unreplayable(fault: Fault, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from kvcanary.evidence import capture, replay
    from kvcanary.evidence.demo_bundles import run_fault_bundle

    monkeypatch.setattr(capture, "BundleLimits", functools.partial(capture.BundleLimits, max_bytes=8))
    path = run_fault_bundle(fault, tmp_path)  # one 16-byte strip is over the limit
    assert path is not None
    result = replay(read_bundle(path))
    assert result.unreplayable, "the bundle holds no KV bytes for its fingerprint rows, and says nothing"
    assert all("byte limit (BundleLimits.max_bytes=8)" in u for u in result.unreplayable), result.unreplayable
    assert not result.extra and not result.missing
    capsys.readouterr()
    assert main(["replay", str(path)]) == 1  # nothing it could replay: not "reproduced"
    out = capsys.readouterr().out
    assert "not replayable" in out and "NOT reproduced" in out, out


def test_evidence_replay_is_the_function_whatever_was_imported_first() -> None:
    """Every submodule of kvcanary.evidence imported first, then the public name: still the function."""
    code = ("import importlib, pkgutil, kvcanary.evidence as ev\n"
            "for m in pkgutil.iter_modules(ev.__path__):\n"
            "    importlib.import_module(f'kvcanary.evidence.{m.name}')\n"
            "from kvcanary.evidence import replay\n"
            "from kvcanary.evidence.rerun import replay as fn\n"
            "assert replay is fn, replay\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert res.returncode == 0, res.stderr


def test_meta_that_is_not_json_writes_nothing(tmp_path: Path) -> None:
    import torch

    from kvcanary.evidence import Bundle, write_bundle

    with pytest.raises(TypeError):
        write_bundle(Bundle({"slot": 1, "owners": {object()}}, {"records/X": torch.zeros(1, 4)}), tmp_path / "b")
    assert not (tmp_path / "b").exists()

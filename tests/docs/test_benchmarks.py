"""The benchmarks page: tables and SVG charts from results files; no results is fine; bad files are named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.docsgen import benchmarks as b

ROW = {"benchmark": "verify", "case": "bs=8 <partial>", "figure": 12.5, "floor": 5.0, "unit": "us",
       "ratio": 2.5, "machine": "1x H200", "date": "2026-05-31"}


def test_no_results_yet(tmp_path: Path) -> None:
    assert b.load(tmp_path / "missing") == []
    md = b.benchmarks_markdown([])
    assert "No results yet" in md and "## Results file format" in md and "<svg" not in md


def test_results_become_tables_and_charts(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([ROW, {**ROW, "case": "bs=64", "floor": None, "ratio": None}]))
    (tmp_path / "b.json").write_text(json.dumps([{**ROW, "benchmark": "write"}]))
    results = b.load(tmp_path)
    md = b.benchmarks_markdown(results)
    assert "## verify" in md and "## write" in md
    assert "| bs=8 <partial> | 12.5 | 5 | 2.5 | us | 1x H200 | 2026-05-31 |" in md
    assert md.count("<svg") == 2 and "bs=8 &lt;partial&gt;" in md


def test_a_malformed_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps([{**ROW, "figure": "fast"}]))
    with pytest.raises(ValueError, match=r"bad\.json"):
        b.load(tmp_path)
    (tmp_path / "bad.json").write_text(json.dumps([{**ROW, "extra": 1}]))
    with pytest.raises(ValueError, match=r"bad\.json"):
        b.load(tmp_path)


def test_the_schema_describes_a_list() -> None:
    schema = b.schema()
    assert schema["type"] == "array"

"""benchmarks/compare.py: rows matched by benchmark and case, the direction each unit counts as better."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import compare


def _write(folder: Path, rows: list[tuple[str, str, float, str]]) -> None:
    folder.mkdir()
    records = [{"benchmark": b, "case": c, "figure": f, "floor": None, "unit": u, "ratio": None,
                "machine": "m", "date": "d"} for b, c, f, u in rows]
    (folder / "x.json").write_text(json.dumps(records))


def test_verdicts_follow_the_unit(tmp_path: Path) -> None:
    _write(tmp_path / "before", [("b", "time up", 10.0, "us"), ("b", "rate up", 100.0, "tokens/s"),
                                 ("b", "time flat", 10.0, "us"), ("b", "rate down", 100.0, "GB/s"),
                                 ("b", "gone", 1.0, "us")])
    _write(tmp_path / "after", [("b", "time up", 10.6, "us"), ("b", "rate up", 110.0, "tokens/s"),
                                ("b", "time flat", 10.4, "us"), ("b", "rate down", 90.0, "GB/s"),
                                ("b", "new", 1.0, "us")])
    pairs = {p.case: p for p in compare.pair(compare.keyed(tmp_path / "before"), compare.keyed(tmp_path / "after"))}
    verdicts = {case: p.verdict(0.05) for case, p in pairs.items()}
    assert verdicts == {"time up": "SLOWER", "rate up": "faster", "time flat": "same", "rate down": "SLOWER",
                        "new": "new", "gone": "gone"}
    assert pairs["time up"].change is not None and abs(pairs["time up"].change - 1.06) < 1e-9


def test_main_writes_the_table(tmp_path: Path) -> None:
    _write(tmp_path / "before", [("b", "c", 2.0, "us")])
    _write(tmp_path / "after", [("b", "c", 1.0, "us")])
    md = tmp_path / "t.md"
    assert compare.main([str(tmp_path / "before"), str(tmp_path / "after"), "--md", str(md)]) == 0
    assert "| b | c | 2 | 1 | us | 0.500 | faster |" in md.read_text()

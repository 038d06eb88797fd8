"""The one report format of every benchmark: rows of (case, figure, floor, ratio), a table, a JSON file.

A :class:`Report` collects :class:`Row` objects as a benchmark measures them, prints each as it comes (so a
long run shows progress) and at the end prints them again as one aligned table. ``--out`` gets a JSON list of
records in the schema of ``tools/docsgen/benchmarks.py`` (``benchmark, case, figure, floor, unit, ratio,
machine, date``), which renders ``docs/benchmarks.md``. What that schema has no field for (targets, notes,
floors measured on the way, tuning, versions) goes to ``<out dir>/raw/<out stem>_raw.json``: not beside
``--out``, so that a results folder holds only files the docs renderer reads.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

SCALE: dict[str, float] = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9, "ms/token": 1e3, "us/token": 1e6,
                           "ns/token": 1e9}
"""Units a figure in seconds converts to; any other unit (``x``, ``%``, ``GB/s``) is taken as given."""


@dataclass(frozen=True)
class Row:
    """One figure beside its floor (same unit); ``target``: the largest ratio the figure should reach."""

    benchmark: str
    case: str
    figure: float
    floor: float | None
    unit: str
    note: str = ""
    target: float | None = None

    @property
    def ratio(self) -> float | None:
        """figure / floor (1.0 = at the floor); None without a positive floor."""
        return self.figure / self.floor if self.floor else None

    @property
    def verdict(self) -> str:
        if self.target is None or self.ratio is None:
            return ""
        return f"{'PASS' if self.ratio <= self.target else 'MISS'} (<= {self.target:.2f}x)"

    def record(self, machine: str, date: str) -> dict[str, Any]:
        """The docs renderer's record (tools/docsgen/benchmarks.py: BenchmarkResult)."""
        return {"benchmark": self.benchmark, "case": self.case, "figure": self.figure, "floor": self.floor,
                "unit": self.unit, "ratio": self.ratio, "machine": machine, "date": date}


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) >= 1 else f"{x:.3g}"


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def machine(device: torch.device | str = "cpu", *extra: str) -> str:
    """Where a benchmark runs: the GPU and CUDA version, or the CPU and its threads; torch; ``extra``."""
    dev = torch.device(device)
    if dev.type == "cuda":
        where = f"1x {torch.cuda.get_device_name(dev)}, CUDA {torch.version.cuda}"
    else:
        where = f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"
    return ", ".join([where, f"torch {torch.__version__}", *extra])


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


@dataclass
class Report:
    """The rows of one benchmark run; ``benchmark`` is the default table (docs section) of each row."""

    benchmark: str
    machine: str = ""
    rows: list[Row] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    quiet: bool = False

    def add(self, case: str, seconds: float, floor_seconds: float | None, *, unit: str = "us", note: str = "",
            target: float | None = None, benchmark: str | None = None) -> Row:
        """A timed figure: ``seconds`` and ``floor_seconds`` converted to ``unit``, kept and printed."""
        scale = SCALE[unit]
        return self.value(case, seconds * scale, None if floor_seconds is None else floor_seconds * scale,
                          unit=unit, note=note, target=target, benchmark=benchmark)

    def value(self, case: str, figure: float, floor: float | None, *, unit: str, note: str = "",
              target: float | None = None, benchmark: str | None = None) -> Row:
        """A figure already in ``unit`` (a ratio, a share), kept and printed."""
        row = Row(benchmark or self.benchmark, case, figure, floor, unit, note, target)
        if not self.quiet:
            if not self.rows:
                print(self._header(64), flush=True)
            print(self._line(row, 64), flush=True)
        self.rows.append(row)
        return row

    def floor(self, name: str, value: float, what: str) -> None:
        """A floor measured on the way (kept in the details file, printed)."""
        self.details.setdefault("floors", {})[name] = {"value": value, "what": what}
        if not self.quiet:
            print(f"floor  {name:<56} {value:.6g}  {what}", flush=True)

    def note(self, text: str) -> None:
        self.details.setdefault("notes", []).append(text)
        if not self.quiet:
            print(text, flush=True)

    @staticmethod
    def _header(width: int) -> str:
        return f"{'case':<{width}} {'figure':>10} {'floor':>10} {'ratio':>8}  {'unit':<8}  verdict, note"

    @staticmethod
    def _line(row: Row, width: int) -> str:
        return (f"{row.case:<{width}} {_num(row.figure):>10} {_num(row.floor):>10} {_ratio(row.ratio):>8}  "
                f"{row.unit:<8}  {row.verdict}{'  ' if row.verdict else ''}{row.note}").rstrip()

    def table(self) -> str:
        """Every row, grouped by benchmark, columns aligned."""
        width = max([len(r.case) for r in self.rows] + [4])
        out: list[str] = []
        for bench in dict.fromkeys(r.benchmark for r in self.rows):
            out += [f"== {bench}", self._header(width)]
            out += [self._line(r, width) for r in self.rows if r.benchmark == bench]
        misses = [r.case for r in self.rows if r.verdict.startswith("MISS")]
        if any(r.target is not None for r in self.rows):
            out.append(f"{len(self.rows)} figures, {len(misses)} above their target ratio: {misses}")
        return "\n".join(out)

    def records(self) -> list[dict[str, Any]]:
        day = today()
        return [r.record(self.machine, day) for r in self.rows]

    def write(self, out: Path | str | None) -> None:
        """Print the table; with ``out``, write the records there and the details beside, under ``raw/``."""
        print(f"\n{self.table()}", flush=True)
        if out is None:
            return
        path = Path(out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.records(), indent=1) + "\n")
        raw = path.parent / "raw" / f"{path.stem}_raw.json"
        raw.parent.mkdir(parents=True, exist_ok=True)
        raw.write_text(json.dumps({"machine": self.machine, "date": today(), **self.details,
                                   "rows": [{**asdict(r), "ratio": r.ratio} for r in self.rows]},
                                  indent=1, default=float) + "\n")
        print(f"wrote {len(self.rows)} records to {path}, details to {raw}", flush=True)

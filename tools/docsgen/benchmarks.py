"""The benchmarks page: tables and inline SVG bar charts from ``benchmarks/results/*.json``.

A results file is a JSON list of :class:`BenchmarkResult` objects: one measured figure of one case of one
benchmark, the hardware floor it is compared with (measured in the same run, same unit), their ratio, and
the machine and date. No results yet is a valid state: the page then says so and shows the format.

The results belong to the project whose site is built, not to the package: callers say where they are
(the mkdocs hook and ``kvcanary docs`` pass ``benchmarks/results`` beside the docs folder).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class BenchmarkResult(BaseModel):
    """One measured figure."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    benchmark: str = Field(description="Benchmark name, e.g. `verify_throughput`; one table per benchmark.")
    case: str = Field(description="The case within the benchmark, e.g. `bs=128 ctx=4096 partial`.")
    figure: float = Field(description="The measured value.")
    floor: float | None = Field(default=None, description="The hardware floor in the same unit, if any.")
    unit: str = Field(description="Unit of figure and floor, e.g. `us`, `GB/s`, `ns/call`.")
    ratio: float | None = Field(default=None, description="figure / floor (1.0 = at the floor), if a floor exists.")
    machine: str = Field(description="Where it ran, e.g. `1x H200, CUDA 12.8`.")
    date: str = Field(description="When it ran, ISO 8601 (`2026-05-31`).")


_RESULTS = TypeAdapter(list[BenchmarkResult])


def schema() -> dict[str, object]:
    """The JSON Schema of one results file."""
    return _RESULTS.json_schema()


def load(directory: Path) -> list[BenchmarkResult]:
    """Every result of every ``*.json`` file, in file then list order; a malformed file raises naming it."""
    out: list[BenchmarkResult] = []
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.json")):
        try:
            out.extend(_RESULTS.validate_json(path.read_bytes()))
        except ValueError as exc:
            raise ValueError(f"{path}: not a list of benchmark results: {exc}") from exc
    return out


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def bar_chart(results: Sequence[BenchmarkResult], width: int = 640) -> str:
    """A horizontal bar chart, one row per case: the figure, and under it the floor (if any)."""
    label_w, bar_h, gap = 220, 14, 10
    top = 24
    peak = max([r.figure for r in results] + [r.floor or 0.0 for r in results] + [1e-30])
    scale = (width - label_w - 80) / peak
    rows = []
    y = top
    for r in results:
        fig_w = max(1.0, r.figure * scale)
        rows.append(f'<text x="{label_w - 8}" y="{y + bar_h - 3}" text-anchor="end">{html.escape(r.case)}</text>')
        rows.append(f'<rect x="{label_w}" y="{y}" width="{fig_w:.1f}" height="{bar_h}" fill="#3f51b5">'
                    f"<title>{html.escape(r.case)}: {_num(r.figure)} {html.escape(r.unit)}</title></rect>")
        rows.append(f'<text x="{label_w + fig_w + 4:.1f}" y="{y + bar_h - 3}">{_num(r.figure)}</text>')
        y += bar_h + 2
        if r.floor is not None:
            fl_w = max(1.0, r.floor * scale)
            rows.append(f'<rect x="{label_w}" y="{y}" width="{fl_w:.1f}" height="{bar_h // 2}" fill="#9e9e9e">'
                        f"<title>floor: {_num(r.floor)} {html.escape(r.unit)}</title></rect>")
            y += bar_h // 2
        y += gap
    unit = html.escape(results[0].unit) if results else ""
    legend = (f'<text x="{label_w}" y="14">{unit}: <tspan fill="#3f51b5">■ figure</tspan> '
              f'<tspan fill="#9e9e9e">■ floor</tspan></text>')
    body = "".join([legend, *rows])
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y + 4}" '
            f'viewBox="0 0 {width} {y + 4}" font-family="sans-serif" font-size="12" role="img" '
            f'aria-label="{html.escape(results[0].benchmark) if results else "benchmark"}">{body}</svg>')


def load_notes(directory: Path) -> list[str]:
    """The hand-written sections beside the results (``*.md`` in ``directory``, by name): what the figures
    decided, such as the backend priorities."""
    return [p.read_text().strip() for p in sorted(directory.glob("*.md"))] if directory.is_dir() else []


def benchmarks_markdown(results: Sequence[BenchmarkResult], notes: Sequence[str] = ()) -> str:
    """The benchmarks page for ``results`` (``load(directory)``; empty: the "no results yet" page), with the
    hand-written ``notes`` sections after the tables."""
    results = list(results)
    out = ["# Benchmarks", "",
           "Every figure is printed beside its floor: the least time (or the most bandwidth) the hardware allows "
           "for the same work, measured in the same run (copy bandwidth for bytes moved, a register-only chain "
           "for serial steps, an empty launch for launch overhead). The ratio says how far from the floor a "
           "figure is. Benchmarks run on the GPU machine and write `benchmarks/results/*.json`; this page is "
           "regenerated from those files at every docs build.", ""]
    if not results:
        out += ["!!! note \"No results yet\"", "",
                "    No file in `benchmarks/results/` yet. Each file is a JSON list of objects with the fields "
                "below; the page will show one table and one chart per benchmark.", ""]
    by_bench: dict[str, list[BenchmarkResult]] = {}
    for r in results:
        by_bench.setdefault(r.benchmark, []).append(r)
    for bench, rs in by_bench.items():
        out += [f"## {bench}", "", "| case | figure | floor | ratio | unit | machine | date |",
                "|---|---|---|---|---|---|---|"]
        for r in rs:
            ratio = r.ratio if r.ratio is not None else (r.figure / r.floor if r.floor else None)
            out.append(f"| {r.case} | {_num(r.figure)} | {_num(r.floor)} | {_num(ratio)} | {r.unit} | "
                       f"{r.machine} | {r.date} |")
        out += ["", bar_chart(rs), ""]
    for note in notes:
        out += [note, ""]
    out += ["## Results file format", "",
            "| field | type | meaning |", "|---|---|---|"]
    for name, f in BenchmarkResult.model_fields.items():
        ann = f.annotation
        tname = getattr(ann, "__name__", str(ann)).replace("typing.", "").replace("Optional", "")
        out.append(f"| `{name}` | {tname.replace('|', '/')} | {(f.description or '').replace('|', '/')} |")
    out += ["", "JSON Schema of one file:", "", "```json", json.dumps(schema(), indent=1), "```", ""]
    return "\n".join(out)

"""Before against after: two folders of benchmark records (``--out`` files), row by row.

Rows are matched by benchmark and case. A figure whose unit is a time, a share, an operation count or a byte
count is better lower; one in bytes or operations per second is better higher; a bare ratio (unit ``x``) is
compared as a time (every ratio the benchmarks print is a cost over a floor or over another backend). A row
that moved the wrong way by more than ``--threshold`` (default 5 %) is marked ``SLOWER``; rows present on one
side only are listed as new or gone. Run: ``python benchmarks/compare.py BEFORE_DIR AFTER_DIR [--md OUT]``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.docsgen.benchmarks import BenchmarkResult, load

HIGHER_IS_BETTER = ("/s",)
"""Unit suffixes of rates: a larger figure is better."""


@dataclass(frozen=True)
class Pair:
    """One row's figure before and after, in its unit."""

    benchmark: str
    case: str
    unit: str
    before: float | None
    after: float | None

    @property
    def change(self) -> float | None:
        """after / before (None when a side is missing or zero)."""
        if self.before is None or self.after is None or self.before == 0:
            return None
        return self.after / self.before

    def verdict(self, threshold: float) -> str:
        """``SLOWER`` past the threshold the wrong way, ``faster`` past it the right way, else ``same``."""
        if self.before is None:
            return "new"
        if self.after is None:
            return "gone"
        change = self.change
        if change is None:
            return "same" if self.after == self.before else "changed from 0"
        worse = change < 1 - threshold if self.unit.endswith(HIGHER_IS_BETTER) else change > 1 + threshold
        better = change > 1 + threshold if self.unit.endswith(HIGHER_IS_BETTER) else change < 1 - threshold
        return "SLOWER" if worse else "faster" if better else "same"


def keyed(folder: Path) -> dict[tuple[str, str], BenchmarkResult]:
    """Every record of every ``*.json`` results file directly in ``folder`` (the docs' loader, which checks
    the schema), keyed by (benchmark, case)."""
    return {(r.benchmark, r.case): r for r in load(folder)}


def pair(before: dict[tuple[str, str], BenchmarkResult], after: dict[tuple[str, str], BenchmarkResult]) -> list[Pair]:
    """The union of both sides' rows, in the after side's order, then the rows only the before side has."""
    out = []
    for key in list(after) + [k for k in before if k not in after]:
        b, a = before.get(key), after.get(key)
        row = a if a is not None else b
        assert row is not None  # the key came from one of the two sides
        out.append(Pair(key[0], key[1], row.unit, None if b is None else b.figure, None if a is None else a.figure))
    return out


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def table(pairs: list[Pair], threshold: float) -> str:
    """A Markdown table of every pair with its change and verdict."""
    lines = ["| benchmark | case | before | after | unit | after / before | verdict |",
             "|---|---|---:|---:|---|---:|---|"]
    for p in pairs:
        change = "-" if p.change is None else f"{p.change:.3f}"
        lines.append(f"| {p.benchmark} | {p.case} | {_num(p.before)} | {_num(p.after)} | {p.unit} | {change} | "
                     f"{p.verdict(threshold)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--threshold", type=float, default=0.05, help="relative change that counts (default 0.05)")
    ap.add_argument("--md", type=Path, help="write the table here as Markdown")
    args = ap.parse_args(argv)
    pairs = pair(keyed(args.before), keyed(args.after))
    text = table(pairs, args.threshold)
    print(text, end="")
    counts: dict[str, int] = {}
    for p in pairs:
        counts[p.verdict(args.threshold)] = counts.get(p.verdict(args.threshold), 0) + 1
    print(", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    if args.md:
        args.md.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

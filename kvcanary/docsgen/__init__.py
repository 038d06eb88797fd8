"""Generation of the documentation site's generated pages (``kvcanary docs``, and the mkdocs hook).

Generated, from the code, at every ``mkdocs build`` (and by ``kvcanary docs``):

- ``errors/index.md`` and one ``errors/KVC-….md`` per error code (:mod:`kvcanary.docsgen.catalog`);
- ``contracts.md`` and ``contracts.json``: every launcher contract (:mod:`kvcanary.docsgen.export`);
- ``support-matrix.md``: what each backend declares and what the registry says here (:mod:`.matrix`);
- ``benchmarks.md``: tables and charts from ``benchmarks/results/*.json`` (:mod:`.benchmarks`).

These paths are listed in ``.gitignore``; the hand-written pages live beside them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ERRORS_DIR = "errors"
PAGES: tuple[str, ...] = ("contracts.md", "contracts.json", "support-matrix.md", "benchmarks.md")


@dataclass
class Report:
    """What :func:`generate` (or :func:`check`) found: paths relative to the docs directory."""

    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def stale(self) -> list[str]:
        return self.written + self.removed


def pages() -> dict[str, Callable[[], str]]:
    """Every generated file (relative path -> its content, built on demand)."""
    from kvcanary.docsgen import benchmarks, catalog, export, matrix

    cat = catalog.catalog()
    out: dict[str, Callable[[], str]] = {
        f"{ERRORS_DIR}/index.md": lambda: catalog.index_markdown(cat),
        "contracts.md": export.contracts_markdown,
        "contracts.json": export.dumps,
        "support-matrix.md": matrix.matrix_markdown,
        "benchmarks.md": benchmarks.benchmarks_markdown,
    }
    for code, page in cat.pages.items():
        out[f"{ERRORS_DIR}/{code}.md"] = page.markdown
    return out


def generate(docs_dir: Path, *, dry_run: bool = False) -> Report:
    """Write every generated page under ``docs_dir`` (only those whose content changed); delete stale pages.

    With ``dry_run`` nothing is written: the report says what would change (``kvcanary docs --check``).
    """
    report = Report()
    wanted = pages()
    for rel, make in wanted.items():
        path = docs_dir / rel
        content = make()
        if path.exists() and path.read_text() == content:
            report.unchanged.append(rel)
            continue
        report.written.append(rel)
        if not dry_run:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    errors = docs_dir / ERRORS_DIR
    if errors.is_dir():
        for path in sorted(errors.glob("*.md")):
            rel = f"{ERRORS_DIR}/{path.name}"
            if rel not in wanted:
                report.removed.append(rel)
                if not dry_run:
                    path.unlink()
    return report

"""Generation of the documentation site's generated pages (``kvcanary docs``, and the mkdocs hook).

Generated, from the code, at every ``mkdocs build`` (and by ``kvcanary docs``):

- ``errors/index.md`` and one ``errors/KVC-….md`` per error code (:mod:`tools.docsgen.catalog`), the
  guard's request failure codes among them (:mod:`tools.docsgen.guard_pages`);
- ``contracts.md`` and ``contracts.json``: every launcher contract (:mod:`tools.docsgen.export`);
- ``support-matrix.md``: what each backend declares and what the registry says here (:mod:`.matrix`);
- ``benchmarks.md``: tables and charts from ``benchmarks/results/*.json`` (:mod:`.benchmarks`).

The same pages, as ``kvcanary explain`` and ``kvcanary contracts`` print them, go into the package's
``kvcanary/catalog.json.gz`` (:mod:`kvcanary.catalog`), so the installed commands need no generator.

Development tooling: lives in the repository's ``tools/``, never in the installed package.

The catalog, the contract reference and the benchmarks page are committed, so their links work when the
repository is browsed (a test fails when a committed page drifts from the code: run ``kvcanary docs``); the
support matrix describes the machine that builds it and is git-ignored. The hand-written pages live beside
them. Everything but the benchmarks page comes from the installed package itself; the benchmark results
are the project's, read from the folder the caller names (by default ``benchmarks/results`` beside the docs
folder).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ERRORS_DIR = "errors"
PAGES: tuple[str, ...] = ("contracts.md", "contracts.json", "support-matrix.md", "benchmarks.md")
PACKAGE_DATA = "kvcanary/catalog.json.gz"
"""The pages as the installed commands read them, relative to the project root."""
RESULTS_SUBDIR = Path("benchmarks") / "results"
"""Where a project keeps its benchmark results files, relative to its root (the folder of ``mkdocs.yml``)."""


@dataclass
class Report:
    """What :func:`generate` (or :func:`check`) found: paths relative to the docs directory."""

    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def stale(self) -> list[str]:
        return self.written + self.removed


def default_results_dir(docs_dir: Path) -> Path:
    """The project's benchmark results: ``benchmarks/results`` in the folder that holds ``docs_dir``."""
    return docs_dir.resolve().parent / RESULTS_SUBDIR


def find_docs_dir(start: Path) -> Path | None:
    """The docs folder of the mkdocs project ``start`` is in: the ``docs_dir`` (default ``docs``) of the first
    ``mkdocs.yml`` found in ``start`` or a parent, or None when there is none."""
    for folder in (start.resolve(), *start.resolve().parents):
        config = folder / "mkdocs.yml"
        if config.is_file():
            m = re.search(r"^docs_dir:\s*['\"]?([^'\"#\s]+)", config.read_text(), flags=re.M)
            return folder / (m.group(1) if m else "docs")
    return None


def pages(results_dir: Path) -> dict[str, Callable[[], str]]:
    """Every generated file (relative path -> its content, built on demand); benchmarks from ``results_dir``."""
    from tools.docsgen import benchmarks, catalog, export, guard_pages, matrix

    cat = catalog.catalog()
    out: dict[str, Callable[[], str]] = {
        f"{ERRORS_DIR}/index.md": lambda: catalog.index_markdown(cat),
        "contracts.md": export.contracts_markdown,
        "contracts.json": export.dumps,
        "support-matrix.md": matrix.matrix_markdown,
        "benchmarks.md": lambda: benchmarks.benchmarks_markdown(benchmarks.load(results_dir),
                                                                benchmarks.load_notes(results_dir)),
    }
    for code, page in cat.pages.items():
        out[f"{ERRORS_DIR}/{code}.md"] = page.markdown
    for code, gpage in guard_pages.pages().items():
        out[f"{ERRORS_DIR}/{code}.md"] = gpage.markdown
    return out


def package_data() -> bytes:
    """The bytes of ``kvcanary/catalog.json.gz``: every page's text and Markdown, and the contract export."""
    from kvcanary import catalog as data
    from tools.docsgen import catalog, export, guard_pages

    pages = {code: data.Page(code, p.text(), p.markdown()) for code, p in catalog.catalog().pages.items()}
    pages.update({code: data.Page(code, p.text(), p.markdown()) for code, p in guard_pages.pages().items()})
    return data.encode(pages, json.loads(export.dumps()))


def _write_package_data(path: Path, report: Report, dry_run: bool) -> None:
    """Write the package's page data at ``path`` unless it already holds the same content."""
    from kvcanary import catalog as data

    content = package_data()
    try:
        same = path.exists() and data.decode(path.read_bytes()) == data.decode(content)
    except (OSError, ValueError):
        same = False
    if same:
        report.unchanged.append(PACKAGE_DATA)
        return
    report.written.append(PACKAGE_DATA)
    if not dry_run:
        path.write_bytes(content)


def generate(docs_dir: Path, *, results_dir: Path | None = None, dry_run: bool = False,
             package_root: Path | None = None) -> Report:
    """Write every generated page under ``docs_dir`` (only those whose content changed); delete stale pages.

    ``results_dir`` holds the benchmark results (default: :func:`default_results_dir`). ``package_root`` is
    the kvcanary checkout whose :data:`PACKAGE_DATA` is written too (None: not written). With ``dry_run``
    nothing is written: the report says what would change (``kvcanary docs --check``).
    """
    report = Report()
    if package_root is not None:
        _write_package_data(package_root / PACKAGE_DATA, report, dry_run)
    wanted = pages(default_results_dir(docs_dir) if results_dir is None else results_dir)
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

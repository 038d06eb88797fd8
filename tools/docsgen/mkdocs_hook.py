"""mkdocs hook: regenerate the generated pages before every build, so the site cannot be stale.

mkdocs loads this file by its path; the repository root goes on ``sys.path`` so ``tools.docsgen`` imports.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

log = logging.getLogger("mkdocs.hooks.kvcanary")


def on_pre_build(config: Any, **kwargs: Any) -> None:
    """Write the error catalog, contracts, support matrix and benchmarks pages into ``docs_dir``.

    The benchmark results are read from ``benchmarks/results`` beside ``mkdocs.yml``. The package's copy of
    the pages (``kvcanary/catalog.json.gz``) is left alone: ``kvcanary docs`` writes it, a test checks it.
    """
    from tools.docsgen import RESULTS_SUBDIR, generate

    root = Path(config["config_file_path"]).resolve().parent
    report = generate(Path(config["docs_dir"]), results_dir=root / RESULTS_SUBDIR)
    if report.stale:
        log.info("kvcanary: regenerated %d page(s), removed %d", len(report.written), len(report.removed))

"""mkdocs hook: regenerate the generated pages before every build, so the site cannot be stale."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.kvcanary")


def on_pre_build(config: Any, **kwargs: Any) -> None:
    """Write the error catalog, contracts, support matrix and benchmarks pages into ``docs_dir``.

    The benchmark results are read from ``benchmarks/results`` beside ``mkdocs.yml``.
    """
    from kvcanary.docsgen import RESULTS_SUBDIR, generate

    root = Path(config["config_file_path"]).resolve().parent
    report = generate(Path(config["docs_dir"]), results_dir=root / RESULTS_SUBDIR)
    if report.stale:
        log.info("kvcanary: regenerated %d page(s), removed %d", len(report.written), len(report.removed))

"""mkdocs hook: regenerate the generated pages before every build, so the site cannot be stale."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.kvcanary")


def on_pre_build(config: Any, **kwargs: Any) -> None:
    """Write the error catalog, contracts, support matrix and benchmarks pages into ``docs_dir``."""
    from kvcanary.docsgen import generate

    report = generate(Path(config["docs_dir"]))
    if report.stale:
        log.info("kvcanary: regenerated %d page(s), removed %d", len(report.written), len(report.removed))

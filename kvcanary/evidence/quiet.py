"""The bundle runs' log levels: lowered while a demo writes bundles, as the plain demo lowers them.

A fault run logs every violation row (thousands of lines); ``kvcanary demo --bundles`` prints its own table,
so the loggers that would repeat it are raised to a level above their reports and restored afterwards.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_logs(names: tuple[str, ...], level: int) -> Iterator[None]:
    """Set each logger of ``names`` to ``level`` for the block; restore each one's own level after it."""
    loggers = [logging.getLogger(n) for n in names]
    before = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(level)
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, before, strict=True):
            lg.setLevel(lvl)

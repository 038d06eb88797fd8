"""The demos' log levels: lowered while a demo runs, restored after it.

A fault run logs every violation row (thousands of lines); each demo prints its own table, so the loggers that
would repeat it are raised above their reports for the run and put back afterwards.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

TRANSFORMERS_LOGGERS = ("kvcanary.manager", "kvcanary.transformers", "ContinuousBatchingLogger")
"""What a transformers run logs per violation and per failed request: the manager's reports, the
integration's, transformers' continuous batching's."""


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

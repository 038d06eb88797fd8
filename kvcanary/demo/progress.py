"""The demo's progress bar (the runs take a minute on a CPU)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """A one-line progress bar on a terminal (redrawn with ``\\r``); silent when not a terminal."""

    def __init__(self, total: int, *, stream: TextIO | None = None, width: int = 30) -> None:
        self.total = max(1, total)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.enabled = bool(getattr(self.stream, "isatty", lambda: False)())
        self._start = time.perf_counter()

    def advance(self, n: int = 1, label: str = "") -> None:
        self.done = min(self.total, self.done + n)
        if not self.enabled:
            return
        filled = self.width * self.done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self._start
        self.stream.write(f"\r[{bar}] {self.done:4d}/{self.total} {elapsed:5.1f}s {label:<24}")
        self.stream.flush()

    def clear(self) -> None:
        """Erase the bar (other output is about to be printed); the next :meth:`advance` draws it again."""
        if self.enabled:
            self.stream.write("\r" + " " * (self.width + 48) + "\r")
            self.stream.flush()

    def close(self) -> None:
        self.clear()

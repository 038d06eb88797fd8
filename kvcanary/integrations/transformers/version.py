"""The transformers versions this integration was tested with, and the check that refuses the others.

The integration reads private parts of transformers' continuous-batching engine (the paged cache's
allocators and block tables, the model runner's step); they change between releases, so a version
outside the tested range fails at attach time with a message rather than misreading the engine.
"""

from __future__ import annotations

MIN_VERSION = (5, 17)
MAX_VERSION_EXCLUSIVE = (5, 24)
SUPPORTED_RANGE = ">=5.17,<5.24"


def parse_version(text: str) -> tuple[int, int]:
    """``"5.23.0"`` -> ``(5, 23)``; anything unparsable -> ``(0, 0)`` (refused)."""
    parts = text.split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or "0")
    except (IndexError, ValueError):
        return 0, 0


def check_version(text: str) -> tuple[int, int]:
    """Return ``(major, minor)`` of a supported transformers version, or raise naming the range."""
    v = parse_version(text)
    if not MIN_VERSION <= v < MAX_VERSION_EXCLUSIVE:
        raise RuntimeError(f"kv-canary: transformers {text} is outside the tested range {SUPPORTED_RANGE} of "
                           "kvcanary's transformers integration (it reads private parts of the continuous-batching "
                           f"engine); install transformers{SUPPORTED_RANGE}")
    return v


SLIDING_MIN_VERSION = (5, 22)
"""From this release on, the cache's layout lets the canary follow a sliding-window group."""


def sliding_supported(text: str) -> bool:
    """Whether transformers ``text`` keeps the layout the sliding-window support reads."""
    return parse_version(text) >= SLIDING_MIN_VERSION

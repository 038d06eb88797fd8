"""The violation policies by name (light: the manager's config and the CLI import it)."""

from __future__ import annotations

from enum import Enum


class ViolationPolicy(str, Enum):
    """What the engine does about a violation: log it, raise, or isolate (fail the requests that read the
    slot, quarantine its block, keep serving the rest)."""

    LOG = "log"
    RAISE = "raise"
    ISOLATE = "isolate"

    @classmethod
    def parse(cls, value: object, *, name: str = "on_violation") -> ViolationPolicy:
        """``value`` as a policy: a :class:`ViolationPolicy` or its name (case-insensitive)."""
        if isinstance(value, ViolationPolicy):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower())
            except ValueError:
                pass
        raise ValueError(f"kv-canary: {name} must be one of log/raise/isolate, got {value!r}")

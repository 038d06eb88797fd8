"""The violation policies by name (light: the manager's config and the CLI import it)."""

from __future__ import annotations

import functools
import importlib
import types
from enum import Enum


class ViolationPolicy(str, Enum):
    """What the engine does about a violation: log it, raise, or isolate (fail the requests that read the
    slot, quarantine its block, keep serving the rest)."""

    LOG = "log"
    RAISE = "raise"
    ISOLATE = "isolate"

    @classmethod
    def parse(cls, value: object, *, name: str = "on_violation") -> ViolationPolicy:
        """``value`` as a policy: a :class:`ViolationPolicy` or its name (case-insensitive); any other value is
        refused with its code (KVC-F)."""
        if isinstance(value, ViolationPolicy):
            return value
        _rules().check_policy_name(value=value, name=name)  # kvcanary/constructors/server_strings.py
        return cls(str(value).strip().lower())


@functools.cache
def _rules() -> types.ModuleType:
    """The contract's module, imported on first use: it names this module's class (and the CLI stays light)."""
    return importlib.import_module("kvcanary.constructors.server_strings")

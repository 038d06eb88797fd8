"""The backend a caller forces must be registered: the one rule ``attach_canaries(backend=...)``,
``CanaryServer(backend=...)`` and the CLI's ``--backend`` follow, checked before a run starts (an
unregistered name would fail every launch with BackendError, one request at a time). The API answers with
a TypeError or ValueError naming its argument; the CLI words the same answer as a usage line with a hint.

The registry (and torch) is imported when a check runs, not at import: the CLI's parser imports this module.
"""

from __future__ import annotations

import os


def env_name() -> str:
    """The environment variable that forces a backend when none is given (``KVCANARY_BACKEND``)."""
    from kvcanary.registry import ENV_BACKEND

    return ENV_BACKEND


def forced_backend(given: str | None) -> str | None:
    """The backend launches are forced to: ``given``, else the environment's (None: neither, or empty)."""
    return given or os.environ.get(env_name()) or None


def unregistered(name: str) -> str | None:
    """Why ``name`` is no registered backend, naming the known ones; None when it is registered."""
    from kvcanary.registry import REGISTRY

    known = REGISTRY.backends()
    if name in known:
        return None
    return f"no backend named {name!r} is registered (known: {', '.join(sorted(known)) or 'none'})"


def check_backend(given: object, *, argument: str = "backend") -> None:
    """``given`` (else the environment's backend) must name a registered backend; None: the registry chooses.
    Not a str: a TypeError naming ``argument``; an unregistered name: a ValueError naming ``argument`` (or
    the environment variable, where it forced the name) and the known backends."""
    if given is not None and not isinstance(given, str):
        raise TypeError(f"kv-canary: {argument} must be a registered backend's name (a str) or None, "
                        f"got {type(given).__name__}")
    name = given if given is not None else forced_backend(None)
    problem = None if name is None else unregistered(name)
    if problem is None:
        return
    if given is None:
        raise ValueError(f"kv-canary: {env_name()} must be unset or name a registered backend; {problem}")
    raise ValueError(f"kv-canary: {argument} must be a registered backend's name or None; {problem}")

"""Checks several subcommands share: a ``--device`` torch can use, a backend that is registered, and a
:class:`~kvcanary.registry.BackendError` as one line. The device and backend rules are the API's
(:mod:`kvcanary.devices`, :mod:`kvcanary.backend_names`), worded here as usage lines with hints.

Nothing heavy is imported at module level: each check imports torch and the registry when it runs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kvcanary.backend_names import env_name, forced_backend, unregistered
from kvcanary.cli.parser import UsageError
from kvcanary.devices import DEVICE_FORMS, as_device, device_problem

if TYPE_CHECKING:
    import torch

    from kvcanary.registry import BackendError


def parse_device(text: str) -> torch.device:
    """``text`` as a torch device, or a :class:`UsageError` naming the forms torch accepts."""
    dev = as_device(text)
    if dev is None:
        raise UsageError(f"unknown device {text!r}", hint=DEVICE_FORMS)
    return dev


def usable_device(text: str) -> torch.device:
    """``text`` as a device torch can use here, or a :class:`UsageError` saying why not."""
    dev = parse_device(text)
    problem = device_problem(dev)
    if problem is not None:
        raise UsageError(f"device {text!r} is not usable: {problem[0]}", hint=problem[1])
    return dev


def _forced_from_env(forced: str | None, given: str | None) -> bool:
    from kvcanary.registry import ENV_BACKEND

    return given is None and forced is not None and os.environ.get(ENV_BACKEND) == forced


def backend_usage_error(exc: BackendError, given: str | None = None) -> UsageError:
    """A :class:`~kvcanary.registry.BackendError` as one line: what cannot run, every reason, the hints.

    ``given`` is the backend the command line named (None: the environment or the registry chose).
    """
    from kvcanary.registry import ENV_BACKEND

    head = (f"backend {exc.forced!r} cannot run {exc.op.value} on {exc.device}" if exc.forced
            else f"no backend can run {exc.op.value} on {exc.device}")
    parts = [r.message if exc.forced else f"{name}: {r.message}" for name, rs in exc.reasons.items() for r in rs]
    hints = list(dict.fromkeys(r.hint for rs in exc.reasons.values() for r in rs if r.hint))
    if _forced_from_env(exc.forced, given):
        hints.insert(0, f"{ENV_BACKEND}={exc.forced} is set in the environment: unset it or name another backend")
    return UsageError(f"{head}: {'; '.join(parts)}", hint="; ".join(hints))


def check_backend_name(given: str | None) -> None:
    """The forced backend (``given``, else ``KVCANARY_BACKEND``) must be registered (the rule:
    :mod:`kvcanary.backend_names`)."""
    name = forced_backend(given)
    problem = None if name is None else unregistered(name)
    if problem is None:
        return
    hint = (f"{env_name()}={name} is set in the environment: unset it or name another backend"
            if given is None else "pass one of the known names, or leave --backend out")
    raise UsageError(problem, hint)

"""Checks several subcommands share: a ``--device`` torch can use, a backend that is registered, and a
:class:`~kvcanary.registry.BackendError` as one line.

Nothing heavy is imported at module level: each check imports torch and the registry when it runs.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kvcanary.cli.parser import UsageError

if TYPE_CHECKING:
    import torch

    from kvcanary.registry import BackendError


def parse_device(text: str) -> torch.device:
    """``text`` as a torch device, or a :class:`UsageError` naming the forms torch accepts."""
    import torch

    try:
        return torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        raise UsageError(f"unknown device {text!r}", hint="a torch device such as cpu, cuda or cuda:1") from None


def device_problem(dev: torch.device) -> tuple[str, str] | None:
    """Why torch cannot use ``dev`` on this machine, with a hint; None when it can."""
    import torch

    if dev.type == "cpu":
        return None
    if dev.type == "meta":
        return "the meta device holds no data (tensors without storage)", "use --device cpu or cuda"
    if dev.type == "cuda":
        if torch.version.cuda is None and not getattr(torch.version, "hip", None):
            return (f"this torch ({torch.__version__}) is a CPU-only build",
                    "install a CUDA build of torch, or use --device cpu")
        if not torch.cuda.is_available():
            return "torch sees no CUDA device", "check the driver (nvidia-smi), or use --device cpu"
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            return f"{dev} does not exist: torch sees {count} CUDA device(s)", f"use cuda:0 to cuda:{count - 1}"
        return None
    module = getattr(torch, dev.type, None)
    available = getattr(module, "is_available", None)
    if callable(available) and not available():
        return f"torch sees no {dev.type} device", "use --device cpu"
    return None


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
    """The forced backend (``given``, else ``KVCANARY_BACKEND``) must be registered."""
    from kvcanary.registry import ENV_BACKEND, REGISTRY

    name = given or os.environ.get(ENV_BACKEND) or None
    known = REGISTRY.backends()
    if name is None or name in known:
        return
    hint = (f"{ENV_BACKEND}={name} is set in the environment: unset it or name another backend"
            if given is None else "pass one of the known names, or leave --backend out")
    raise UsageError(f"no backend named {name!r} is registered (known: {', '.join(sorted(known)) or 'none'})", hint)

"""Which device names torch can use on this machine: the one rule ``CanaryServer(device=...)`` and the CLI's
``--device`` follow. The API answers with a TypeError or ValueError naming its argument; the CLI words the
same answer as a usage line with a hint.

torch is imported when a check runs, not at import: the CLI's parser imports this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

DEVICE_FORMS = "a torch device such as cpu, cuda or cuda:1"
"""The forms a device name takes, as the errors name them."""


def as_device(text: str) -> torch.device | None:
    """``text`` as a torch device; None when torch names no device so (``gpu``, ``''``, ``cuda:x``)."""
    import torch

    try:
        return torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        return None


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


def check_device(value: object, *, argument: str = "device") -> torch.device:
    """``value`` as a device torch can use here. Not a str: a TypeError; a name torch does not parse, or a
    device this machine lacks: a ValueError. Each names ``argument`` and the rule."""
    if not isinstance(value, str):
        raise TypeError(f"kv-canary: {argument} must be a str naming {DEVICE_FORMS}, got {type(value).__name__}")
    dev = as_device(value)
    if dev is None:
        raise ValueError(f"kv-canary: {argument} must name {DEVICE_FORMS}, got {value!r}")
    problem = device_problem(dev)
    if problem is not None:
        raise ValueError(f"kv-canary: {argument} must be a device torch can use here; {value!r} is not: "
                         f"{problem[0]}")
    return dev

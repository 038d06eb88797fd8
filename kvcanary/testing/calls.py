"""Small valid calls of every launcher, for tests, typing checks and the host-overhead benchmark.

Each operation declares its builder with it (``Operation(..., call=builder)``); this module reads them:
``calls.of(Op.WRITE, device, assert_inputs=True)``, or by the operation's lower-case constant,
``calls.write(device, assert_inputs=True)`` (``calls.scatter`` for ``Op.SCATTER``). An operation declared
outside kvcanary is reached the same way. Each call returns fresh keyword arguments (no ``backend``) that pass
the launcher's contract; tests mutate one argument to break one rule. The zero tensors and structures the
builders use are here too.
"""

from __future__ import annotations

from typing import Any

import torch

from kvcanary.operation import CallBuilder, Operation, operations
from kvcanary.ops._calls import context, source, verify_plan, write_plan

__all__ = ["builder", "context", "i32", "i64", "of", "source", "verify_plan", "write_plan"]

Device = torch.device | str


def i64(n: int, device: Device = "cpu") -> torch.Tensor:
    return torch.zeros(n, dtype=torch.int64, device=device)


def i32(n: int, device: Device = "cpu") -> torch.Tensor:
    return torch.zeros(n, dtype=torch.int32, device=device)


def of(op: Operation | str, device: Device = "cpu", **options: Any) -> dict[str, Any]:
    """A small valid call of ``op`` (an operation, or its name) on ``device``, with the builder's ``options``."""
    return Operation.named(op).call(device, **options)


def builder(name: str) -> CallBuilder:
    """The call builder of the operation whose constant is ``name.upper()`` (``"write"``: ``Op.WRITE``'s)."""
    for op in operations():
        if op.constant == name.upper() and op.call_builder is not None:
            return op.call_builder
    raise AttributeError(f"kvcanary.testing.calls has no {name!r}: no declared operation with the constant "
                         f"{name.upper()!r} declares a call builder")


def __getattr__(name: str) -> CallBuilder:  # calls.write, calls.plan_entries, ...: read from the operations
    if name.startswith("_"):
        raise AttributeError(name)
    return builder(name)

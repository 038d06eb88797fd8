"""``torch.library.opcheck`` over kvcanary's operators: one call, and fresh random valid calls of an operation."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch

from kvcanary.operation import operators
from kvcanary.registry import Op
from kvcanary.testing.scenarios import GENERATORS, Device


def op_of(launcher: Callable[..., None]) -> Op:
    """The operation a public launcher dispatches."""
    target = launcher.__kvc_operator__.op  # type: ignore[attr-defined]
    return next(op for op, o in operators().items() if o.op is target)


def opcheck(op: Op, kwargs: dict[str, Any], backend: str) -> None:
    """opcheck ``op``'s operator on the launch ``kwargs``, forced to ``backend``; AssertionError on a failure."""
    operator = operators()[op]
    result = torch.library.opcheck(operator.op, (*operator.flatten(**kwargs), backend))
    assert set(result.values()) == {"SUCCESS"}, result


def opcheck_random(op: Op, device: Device, backend: str, count: int) -> None:
    """opcheck ``count`` fresh random valid calls of ``op``; a failure names the seed that reproduces it."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    for _ in range(count):
        call = GENERATORS[op](rng)
        try:
            opcheck(op, call.make(device), backend)
        except AssertionError as exc:
            raise AssertionError(f"{op.value} {call.label} from random.Random({seed}): {exc}") from exc

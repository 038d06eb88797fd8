"""``torch.library.opcheck`` over kvcanary's operators, for one launch's keyword arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kvcanary.operation import operators
from kvcanary.registry import Op


def op_of(launcher: Callable[..., None]) -> Op:
    """The operation a public launcher dispatches."""
    target = launcher.__kvc_operator__.op  # type: ignore[attr-defined]
    return next(op for op, o in operators().items() if o.op is target)


def opcheck(op: Op, kwargs: dict[str, Any], backend: str) -> None:
    """opcheck ``op``'s operator on the launch ``kwargs``, forced to ``backend``; AssertionError on a failure."""
    operator = operators()[op]
    result = torch.library.opcheck(operator.op, (*operator.flatten(**kwargs), backend))
    assert set(result.values()) == {"SUCCESS"}, result

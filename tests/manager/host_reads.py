"""A guard for code that must not read a device value on the host (so that it can be captured in a CUDA graph):
inside :func:`no_host_reads`, every way a tensor's value reaches Python raises."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch

HOST_READS = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__", "cpu")
"""The ``torch.Tensor`` methods that hand a tensor's value to the host."""


def _forbid(*_: Any, **__: Any) -> Any:
    raise AssertionError("a device value was read on the host inside the per-forward path")


@contextlib.contextmanager
def no_host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every method of :data:`HOST_READS` raises an AssertionError inside the block, and is restored after it."""
    with monkeypatch.context() as m:
        for name in HOST_READS:
            m.setattr(torch.Tensor, name, _forbid)
        yield

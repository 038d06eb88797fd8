"""Tensor mutations a rule may name in ``breaks``: how the error catalog builds a failing example.

Small and dependency-free on purpose: contract declarations import these, and declarations are runtime code,
while the counterexample search that applies them (``tools/counterexamples.py`` of the repository) is docs
tooling, outside the package.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Misalign:
    """The same shape, dtype, device and strides, starting ``nbytes`` past an aligned address."""

    nbytes: int = 8

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        k = max(1, self.nbytes // t.element_size())
        base = torch.zeros(t.numel() + k, dtype=t.dtype, device=t.device)
        return base[k:].view(t.shape)

    def describe(self, name: str) -> str:
        return f"`{name}` starts {self.nbytes} bytes past an aligned address"


@dataclass(frozen=True)
class PadStride:
    """The same shape and dtype, with dimension ``dim``'s stride ``nbytes`` longer (a slice of a wider tensor)."""

    dim: int = 0
    nbytes: int = 8

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        k = max(1, self.nbytes // t.element_size())
        base = _zeros(t, self.dim + 1, t.shape[self.dim + 1] + k)
        index = [slice(None)] * t.dim()
        index[self.dim + 1] = slice(0, t.shape[self.dim + 1])
        return base[tuple(index)]

    def describe(self, name: str) -> str:
        return f"`{name}`'s dim-{self.dim} stride is {self.nbytes} bytes longer than its rows"


@dataclass(frozen=True)
class Resize:
    """The same dtype and device, with dimension ``dim`` resized to ``size`` (0: an empty tensor)."""

    dim: int = 0
    size: int = 0

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        return _zeros(t, self.dim, self.size)

    def describe(self, name: str) -> str:
        return f"`{name}` has {self.size} entries along dim {self.dim}"


@dataclass(frozen=True)
class Strided:
    """The same shape and dtype, every ``step``-th element along ``dim`` (its stride ``step`` elements)."""

    dim: int = 0
    step: int = 2

    def apply(self, t: torch.Tensor) -> torch.Tensor:
        base = _zeros(t, self.dim, t.shape[self.dim] * self.step)
        index = [slice(None)] * t.dim()
        index[self.dim] = slice(None, None, self.step)
        return base[tuple(index)]

    def describe(self, name: str) -> str:
        return f"`{name}` takes every {self.step}th element along dim {self.dim}"


def _zeros(t: torch.Tensor, dim: int, size: int) -> torch.Tensor:
    """Zeros of ``t``'s dtype and device, with ``t``'s shape but ``size`` along ``dim``."""
    shape = list(t.shape)
    shape[dim] = size
    return torch.zeros(shape, dtype=t.dtype, device=t.device)


TensorMutation = Misalign | PadStride | Resize | Strided

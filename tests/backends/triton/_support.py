"""The device the Triton tests run on: ``cuda`` when there is one (compiled kernels), else ``cpu`` (the
interpreter). Their inputs come from ``tools.scenarios``, their checks from ``kvcanary.testing.parity``
(which also drops what torch_ref leaves unspecified for a parallel backend from write calls)."""

from __future__ import annotations

import torch


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")

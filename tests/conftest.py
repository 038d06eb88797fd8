"""Test-suite setup: Triton runs through its interpreter when there is no GPU (set before any import)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

ONE_THREAD = ("demo", "manager")  # folders of tiny tensors, where thread hand-offs dominate on 2 cores


@pytest.fixture(autouse=True)
def _one_thread(request: pytest.FixtureRequest) -> Iterator[None]:
    if not any(part in ONE_THREAD for part in request.path.parent.parts[-1:]):
        yield
        return
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

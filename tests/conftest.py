"""Test-suite setup: Triton runs through its interpreter when there is no GPU (set before any import), and
Hypothesis keeps its example database in the system's temporary folder, not in the checkout (pytest's own
cache is off: ``-p no:cacheprovider`` in pyproject.toml)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# read by Hypothesis when it first stores an example (after this file is imported); a value set outside wins
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "kvcanary-hypothesis"))

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

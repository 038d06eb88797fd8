"""One tiny seeded model of each kind for the whole folder (building them is the slow part)."""

from __future__ import annotations

from typing import Any

import pytest

from kvcanary.integrations.transformers.workload import tiny_hybrid, tiny_llama
from tests.integrations.transformers.harness import SEED


@pytest.fixture(scope="session")
def model() -> Any:
    return tiny_llama(seed=SEED)


@pytest.fixture(scope="session")
def hybrid() -> Any:
    """A tiny model with a sliding-window layer beside a full-attention one."""
    return tiny_hybrid(seed=SEED)

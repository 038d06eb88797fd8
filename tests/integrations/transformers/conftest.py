"""One tiny seeded Llama for the whole module set (building it is the slow part)."""

from __future__ import annotations

from typing import Any

import pytest

from kvcanary.integrations.transformers.workload import tiny_llama
from tests.integrations.transformers.harness import SEED


@pytest.fixture(scope="session")
def model() -> Any:
    return tiny_llama(seed=SEED)

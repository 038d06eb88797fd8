"""Shared pieces of the transformers integration tests: one tiny model per session, a fresh seed per run."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
import transformers

from kvcanary.integrations.transformers import CanaryReport, TransformersCanary, attach_canaries
from kvcanary.integrations.transformers.faults import FaultHook
from kvcanary.integrations.transformers.version import sliding_supported
from kvcanary.integrations.transformers.workload import generate, shared_prefix_prompts

SLIDING = pytest.mark.skipif(not sliding_supported(transformers.__version__),
                             reason="transformers < 5.22 keeps another sliding-window layout, refused there")
"""For the sliding-window tests: CI's transformers (the newest in range) runs them."""

SEED = int(os.environ.get("KVCANARY_TEST_SEED", "0")) or random.SystemRandom().randrange(1, 1 << 20)
"""Fresh model and prompts each run; the seed is in every failure message (``KVCANARY_TEST_SEED`` replays it)."""


def prompts() -> list[list[int]]:
    """The run's shared-prefix prompts."""
    return shared_prefix_prompts(seed=SEED)


def run(model: Any, *, hook: FaultHook | None = None, **kwargs: Any) -> tuple[TransformersCanary,
                                                                              dict[str, list[int]]]:
    """One generate_batch run with canaries attached (and a fault, if given)."""
    with attach_canaries(model, **kwargs) as canary:
        if hook is not None:
            canary.hooks.append(hook)
        out = generate(model, prompts())
    return canary, out


def first(canary: TransformersCanary) -> CanaryReport:
    """The first report of a run that must have found something."""
    assert canary.reports, f"seed {SEED}: the fault went unnoticed"
    return canary.reports[0]

"""The canary changes nothing it observes, and a clean run is silent."""

from __future__ import annotations

from typing import Any

import pytest

from kvcanary.integrations.transformers import attach_canaries
from kvcanary.integrations.transformers.workload import generate
from tests.integrations.transformers.harness import SEED, SLIDING, prompts, run


def test_tokens_identical_with_canaries_on_and_off_and_clean_run_silent(model: Any) -> None:
    off = generate(model, prompts())
    canary, on = run(model)
    assert on == off, f"seed {SEED}: canaries changed the generated tokens"
    assert canary.reports == [], f"seed {SEED}: clean run reported {[r.event.message for r in canary.reports]}"
    assert canary.steps > 10
    assert canary.prefix_hits > 0, "the workload must exercise prefix-shared blocks"
    assert canary.swept_entries > 0, "the sweep must have verified cached or shared slots"
    assert 0 < canary.sweep_entry_seconds < canary.host_seconds["end_step"]
    manager = canary.managers[0]
    assert manager.sweep_passes > 0
    assert int(manager.state.kernel_run_counters.sum()) > 0


def test_all_bytes_mode_is_identical_and_silent(model: Any) -> None:
    off = generate(model, prompts())
    canary, on = run(model, real_kv="all", sweep_interval=1)
    assert on == off, f"seed {SEED}"
    assert canary.reports == [], f"seed {SEED}"


@SLIDING
def test_sliding_window_model_identical_and_silent(hybrid: Any) -> None:
    off = generate(hybrid, prompts())
    canary, on = run(hybrid)
    assert on == off, f"seed {SEED}: canaries changed the generated tokens"
    assert canary.reports == [], f"seed {SEED}: clean run reported {[r.event.message for r in canary.reports]}"
    layout = canary.layout
    assert layout is not None and layout.sliding is not None
    assert max(len(p) for p in prompts()) > layout.sliding.window, "the ring must wrap"
    counters = canary.managers[0].state.kernel_run_counters
    swa = [t for t in canary.managers[0].active_tags if t.name.endswith("_SWA")]
    assert swa and all(int(counters[int(t)]) > 0 for t in swa)


def test_chunked_prefill_identical_and_silent(model: Any) -> None:
    off = generate(model, prompts(), max_batch_tokens=5)
    with attach_canaries(model) as canary:
        on = generate(model, prompts(), max_batch_tokens=5)
    assert on == off and canary.reports == [], f"seed {SEED}"


@SLIDING
def test_sliding_window_chunks_shorter_than_the_window_are_silent(hybrid: Any) -> None:
    window = 6  # tiny_hybrid's
    off = generate(hybrid, prompts(), max_batch_tokens=window - 1)
    with attach_canaries(hybrid) as canary:
        on = generate(hybrid, prompts(), max_batch_tokens=window - 1)
    assert on == off and canary.reports == [], f"seed {SEED}"


@SLIDING
@pytest.mark.parametrize("chunk", [6, 9, 13])
def test_sliding_window_chunks_as_long_as_the_window_or_longer_are_silent(hybrid: Any, chunk: int) -> None:
    """A prefill chunk of a request that already has cached tokens and spans the whole ring (6 tokens: every
    slot, the seed's included, rewritten in the forward; 9 and 13: the first tokens go to the engine's trash)
    gives the seed no SWA slot: the chain restarts there, with no false ``write_position``."""
    window = 6  # tiny_hybrid's
    prompt = [(7 * i) % 190 + 1 for i in range(3 * window + 2)]  # chunks [0, c), [c, 2c), ...: past > 0
    off = generate(hybrid, [prompt], max_batch_tokens=chunk, max_new_tokens=8)
    with attach_canaries(hybrid) as canary:
        on = generate(hybrid, [prompt], max_batch_tokens=chunk, max_new_tokens=8)
    assert on == off, f"chunk {chunk}: canaries changed the generated tokens"
    assert canary.reports == [], f"chunk {chunk}: {[r.event.message.splitlines()[0] for r in canary.reports]}"
    counters = canary.managers[0].state.kernel_run_counters
    swa = [t for t in canary.managers[0].active_tags if t.name.endswith("_SWA")]
    assert swa and all(int(counters[int(t)]) > 0 for t in swa)

"""The CanaryBatch the integration hands the manager: the engine's own token ids and positions (their memory and
dtype: the manager's staging copy widens them, inside its staged graph on a GPU), and a decode step of the same
tensors reusing the previous step's checked batch, never stale values."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kvcanary.integrations.transformers import StepView, attach_canaries
from kvcanary.integrations.transformers.workload import generate
from kvcanary.manager import CanaryBatch, CanaryManager
from tests.integrations.transformers.harness import SEED, prompts


def test_batches_are_the_engine_inputs_and_reused_across_decode_steps(
        model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    engine: list[tuple[tuple[torch.Tensor, int], tuple[torch.Tensor, int]]] = []
    handed: list[tuple[CanaryBatch, tuple[torch.Tensor, int], tuple[torch.Tensor, int]]] = []

    def kept(t: torch.Tensor) -> tuple[torch.Tensor, int]:  # the values as they are now, and where they are
        return t.clone(), t.data_ptr()

    def hook(view: StepView) -> None:  # before the batch is built: the engine's own inputs of the step
        engine.append((kept(view.batch_data["input_ids"][0]), kept(view.batch_data["position_ids"][0])))

    prepare = CanaryManager.prepare

    def spy(self: CanaryManager, batch: CanaryBatch, **kw: Any) -> None:
        handed.append((batch, kept(batch.input_ids), kept(batch.positions)))
        prepare(self, batch, **kw)

    monkeypatch.setattr(CanaryManager, "prepare", spy)
    with attach_canaries(model) as canary:
        canary.hooks.append(hook)
        generate(model, prompts())
    assert canary.reports == [], f"seed {SEED}"
    assert len(handed) == len(engine) == canary.steps > 10
    for step, ((batch, ids, pos), (e_ids, e_pos)) in enumerate(zip(handed, engine, strict=True)):
        fields = (batch.req_pool_indices, batch.prefix_lens, batch.extend_lens, batch.out_cache_loc)
        assert all(t.dtype == torch.int64 for t in fields), f"seed {SEED} step {step}: {[t.dtype for t in fields]}"
        for (mine, at), (theirs, their_at), what in ((ids, e_ids, "token ids"), (pos, e_pos, "positions")):
            # the engine's memory itself (its dtype), holding the step's values when the manager is handed them
            n = mine.shape[0]
            assert at == their_at and mine.dtype == theirs.dtype, f"seed {SEED} step {step}: {what}"
            assert torch.equal(mine, theirs[:n]), f"seed {SEED} step {step}: {what}"
    built = len({id(b) for b, _, _ in handed})
    assert built < len(handed), f"seed {SEED}: no decode step reused the previous step's batch"

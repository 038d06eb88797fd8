"""The CanaryBatch the integration hands the manager: the engine's token ids and positions widened to int64
(so the manager's staging ``torch.cat`` has one dtype), and a decode step of the same tensors reusing the
previous step's checked batch, never stale values."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kvcanary.integrations.transformers import StepView, attach_canaries
from kvcanary.integrations.transformers.pool import _Cast
from kvcanary.integrations.transformers.workload import generate
from kvcanary.manager import CanaryBatch, CanaryManager
from tests.integrations.transformers.harness import SEED, prompts


def test_batches_are_int64_equal_to_the_engine_inputs_and_reused_across_decode_steps(
        model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    engine: list[tuple[torch.Tensor, torch.Tensor]] = []
    handed: list[tuple[CanaryBatch, torch.Tensor, torch.Tensor]] = []

    def hook(view: StepView) -> None:  # before the batch is built: the engine's own inputs of the step
        engine.append((view.batch_data["input_ids"][0].clone(), view.batch_data["position_ids"][0].clone()))

    prepare = CanaryManager.prepare

    def spy(self: CanaryManager, batch: CanaryBatch, **kw: Any) -> None:
        handed.append((batch, batch.input_ids.clone(), batch.positions.clone()))
        prepare(self, batch, **kw)

    monkeypatch.setattr(CanaryManager, "prepare", spy)
    with attach_canaries(model) as canary:
        canary.hooks.append(hook)
        generate(model, prompts())
    assert canary.reports == [], f"seed {SEED}"
    assert len(handed) == len(engine) == canary.steps > 10
    for step, ((batch, ids, pos), (e_ids, e_pos)) in enumerate(zip(handed, engine, strict=True)):
        fields = (batch.req_pool_indices, batch.prefix_lens, batch.extend_lens, batch.input_ids, batch.positions,
                  batch.out_cache_loc)
        assert all(t.dtype == torch.int64 for t in fields), f"seed {SEED} step {step}: {[t.dtype for t in fields]}"
        n = ids.shape[0]
        assert torch.equal(ids, e_ids[:n].to(torch.int64)), f"seed {SEED} step {step}: token ids"
        assert torch.equal(pos, e_pos[:n].to(torch.int64)), f"seed {SEED} step {step}: positions"
    built = len({id(b) for b, _, _ in handed})
    assert built < len(handed), f"seed {SEED}: no decode step reused the previous step's batch"


def test_cast_of_two_rows_of_one_tensor_is_one_copy() -> None:
    bulk = torch.arange(40, dtype=torch.int32).view(4, 10)
    out = torch.zeros(2, 6, dtype=torch.int64)
    cast = _Cast.of(bulk[0, :6], bulk[1, :6], out)
    assert len(cast.copies) == 1
    for dst, src in cast.copies:
        dst.copy_(src)
    assert cast.ids.tolist() == list(range(6)) and cast.pos.tolist() == list(range(10, 16))


@pytest.mark.parametrize("layout", ["separate", "reversed", "overlapping"])
def test_cast_of_other_inputs_is_one_copy_each(layout: str) -> None:
    bulk = torch.arange(40, dtype=torch.int32).view(4, 10)
    ids, pos = {"separate": (bulk[0, :6], torch.arange(100, 106, dtype=torch.int32)),
                "reversed": (bulk[1, :6], bulk[0, :6]),
                "overlapping": (bulk[0, :6], bulk[0, 3:9])}[layout]
    out = torch.zeros(2, 6, dtype=torch.int64)
    cast = _Cast.of(ids, pos, out)
    assert len(cast.copies) == 2
    for dst, src in cast.copies:
        dst.copy_(src)
    assert cast.ids.tolist() == ids.tolist() and cast.pos.tolist() == pos.tolist()

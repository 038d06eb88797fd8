"""``launch_canary_write_kernel``: stamp the records of the tokens a step writes."""

from __future__ import annotations

import torch

from kvcanary.context import VerifyOrWriteContext
from kvcanary.contract.write import check_write
from kvcanary.plans import WritePlan
from kvcanary.registry import REGISTRY, Op


def launch_canary_write_kernel(
    *,
    context: VerifyOrWriteContext,
    plan: WritePlan,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    out_cache_loc: torch.Tensor,
    enable_write_input_assert: bool,
    expected_input_tokens: torch.Tensor | None,
    expected_input_positions: torch.Tensor | None,
    backend: str | None = None,
) -> None:
    """Write one record per token with ``out_cache_loc >= 0``, chained per request from its seed slot."""
    kwargs = {
        "context": context,
        "plan": plan,
        "input_ids": input_ids,
        "positions": positions,
        "out_cache_loc": out_cache_loc,
        "enable_write_input_assert": enable_write_input_assert,
        "expected_input_tokens": expected_input_tokens,
        "expected_input_positions": expected_input_positions,
    }
    device = check_write(**kwargs)
    REGISTRY.run(Op.WRITE, device, backend, kwargs)

"""``launch_canary_write_kernel``: stamp the records of the tokens a step writes.

The overloads let a type checker reject misuse of the input assert before it runs: with a literal
``enable_write_input_assert=True`` both expected tensors are required, with ``False`` both must be None.
Misuse matches a ``@deprecated`` overload whose message is the runtime error's (enable mypy's
``deprecated`` error code to see it). A plain ``bool`` flag uses the general signature and the runtime
contract decides.
"""

from __future__ import annotations

from typing import Literal

import torch
from typing_extensions import deprecated, overload

from kvcanary.context import VerifyOrWriteContext
from kvcanary.contract.write import check_write
from kvcanary.plans import WritePlan
from kvcanary.registry import REGISTRY, Op


@overload
def launch_canary_write_kernel(
    *, context: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor, positions: torch.Tensor,
    out_cache_loc: torch.Tensor, enable_write_input_assert: Literal[True], expected_input_tokens: torch.Tensor,
    expected_input_positions: torch.Tensor, backend: str | None = None,
) -> None: ...
@overload
def launch_canary_write_kernel(
    *, context: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor, positions: torch.Tensor,
    out_cache_loc: torch.Tensor, enable_write_input_assert: Literal[False], expected_input_tokens: None,
    expected_input_positions: None, backend: str | None = None,
) -> None: ...
@overload
@deprecated("expected input tensors are required when enable_write_input_assert=True")
def launch_canary_write_kernel(
    *, context: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor, positions: torch.Tensor,
    out_cache_loc: torch.Tensor, enable_write_input_assert: Literal[True], expected_input_tokens: None,
    expected_input_positions: torch.Tensor | None, backend: str | None = None,
) -> None: ...
@overload
@deprecated("expected input tensors are required when enable_write_input_assert=True")
def launch_canary_write_kernel(
    *, context: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor, positions: torch.Tensor,
    out_cache_loc: torch.Tensor, enable_write_input_assert: Literal[True], expected_input_tokens: torch.Tensor | None,
    expected_input_positions: None, backend: str | None = None,
) -> None: ...
@overload
@deprecated("expected input tensors must be None when enable_write_input_assert=False")
def launch_canary_write_kernel(
    *, context: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor, positions: torch.Tensor,
    out_cache_loc: torch.Tensor, enable_write_input_assert: Literal[False], expected_input_tokens: torch.Tensor,
    expected_input_positions: torch.Tensor | None, backend: str | None = None,
) -> None: ...
@overload
@deprecated("expected input tensors must be None when enable_write_input_assert=False")
def launch_canary_write_kernel(
    *, context: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor, positions: torch.Tensor,
    out_cache_loc: torch.Tensor, enable_write_input_assert: Literal[False], expected_input_tokens: torch.Tensor | None,
    expected_input_positions: torch.Tensor, backend: str | None = None,
) -> None: ...
@overload
def launch_canary_write_kernel(
    *, context: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor, positions: torch.Tensor,
    out_cache_loc: torch.Tensor, enable_write_input_assert: bool, expected_input_tokens: torch.Tensor | None,
    expected_input_positions: torch.Tensor | None, backend: str | None = None,
) -> None: ...


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

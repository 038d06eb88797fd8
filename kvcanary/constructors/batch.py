"""Contract of ``CanaryBatch(...)``: one forward's rows and tokens, as the canary reads them.

It runs at construction, on the host, before every forward: shapes, dtypes and devices only, never a device
value. The expected-token snapshot must hold one length per row (SGLang's RuntimeError text, word for word);
that the batch lives on the manager's device is checked by ``CanaryBatch.validate`` (``batch_device.py``).
"""

from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.errors import FAMILY
from kvcanary.manager.expected import ExpectedTokens
from kvcanary_contracts import (
    Contract,
    ContractInfo,
    ContractRuntimeError,
    ContractTypeError,
    Relation,
    ScalarArg,
    TensorArg,
)

_INDEX = (torch.int32, torch.int64)
_TYPE = {"type": ContractTypeError, "dtype": ContractTypeError}  # a wrong type or dtype is a TypeError


def _index(label: str, dim: str, first: str | None = None, *, optional: bool = False) -> TensorArg:
    """A 1-D int32/int64 index tensor of ``dim`` entries; ``first`` names the tensor that binds ``dim``."""
    messages = {"device": "{name} must be on req_pool_indices' device {reference_device}, got {device}"}
    if first is not None:
        messages["size"] = "{name} length must equal " + first + " length {expected}, got {actual}"
    return TensorArg(dtype=_INDEX, shape=(dim,), contiguous=False, optional=optional or None, label=label,
                     errors=_TYPE, messages=messages)


class CanaryBatchContract(Contract):
    """``CanaryBatch(...)``: rows (``bs``) and flat tokens (``num_tokens``), every tensor on one device."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "CanaryBatch", "B", "One forward's rows and tokens, as the canary reads them",
        device_key="req_pool_indices",
        rules=(
            Relation(
                name="expected_tokens_one_length_per_row",
                require="expected_tokens is None or expected_tokens.lens.shape[0] == bs",
                over=("expected_tokens", "req_pool_indices"), error=ContractRuntimeError,
                values={"n": "expected_tokens.lens.shape[0]"},
                message="req_all_ids_lens length {n} != batch_size {bs}; ForwardBatch snapshot diverged",
                why="The snapshot is taken from the same batch the forward runs: one length per request row. "
                    "Another count means the engine's batch changed between the snapshot and the forward.",
                fix="Take the snapshot from the forward's own batch, one (possibly empty) row per request row, "
                    "padding rows included.",
                breaks={"expected_tokens": "ExpectedTokens.from_lists([[]])"}),
        ),
        constants={"ExpectedTokens": ExpectedTokens},
    )

    req_pool_indices: Annotated[torch.Tensor, _index("req_pool_indices", "bs")] = Field(
        description="Each row's req_to_token row (0: a padding row).")
    prefix_lens: Annotated[torch.Tensor, _index("prefix_lens", "bs", "req_pool_indices")] = Field(
        description="Tokens of each row already in the KV.")
    extend_lens: Annotated[torch.Tensor, _index("extend_lens", "bs", "req_pool_indices")] = Field(
        description="Tokens each row writes this forward.")
    input_ids: Annotated[torch.Tensor, _index("input_ids", "num_tokens")] = Field(
        description="The forward's tokens, flat and grouped by row in row order, padding rows last.")
    positions: Annotated[torch.Tensor, _index("positions", "num_tokens", "input_ids")] = Field(
        description="Each token's position in its request.")
    out_cache_loc: Annotated[torch.Tensor, _index("out_cache_loc", "num_tokens", "input_ids")] = Field(
        description="Each token's full-pool KV slot (-1: not written).")
    expected_tokens: Annotated[ExpectedTokens | None, ScalarArg(
        ExpectedTokens, optional=True, label="expected_tokens", errors={"type": ContractTypeError},
        messages={"type": "{name} must be an ExpectedTokens or None, got {type}"})] = Field(
        default=None, description="The host snapshot of each row's token ids, for VERIFY_TOKEN (None: none).")
    expected_input_tokens: Annotated[torch.Tensor | None, _index(
        "expected_input_tokens", "num_tokens", "input_ids", optional=True)] = Field(
        default=None, description="An oracle's token per flat token, for the write-time input assert.")
    expected_input_positions: Annotated[torch.Tensor | None, _index(
        "expected_input_positions", "num_tokens", "input_ids", optional=True)] = Field(
        default=None, description="An oracle's position per flat token, for the write-time input assert.")


check_canary_batch = CanaryBatchContract.checker()

"""Contract of ``ExpectedTokens(flat=..., lens=...)``: the host snapshot of each row's own token ids.

The snapshot is a pair of CPU tensors taken before the forward, so its sums are read on the host without a
device sync. A snapshot whose lengths do not add up keeps SGLang's RuntimeError text word for word.
"""

from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.errors import FAMILY
from kvcanary_contracts import Contract, ContractInfo, ContractRuntimeError, ContractTypeError, Relation, TensorArg

_HOST = "{name} must be a 1-D int64 CPU tensor, got "
_MESSAGES = {"type": _HOST + "{type}", "dtype": _HOST + "dtype {actual}", "rank": _HOST + "shape {shape}"}


def _host(label: str) -> TensorArg:
    return TensorArg(dtype=torch.int64, shape=("*",), contiguous=False, same_device=False, label=label,
                     errors={"type": ContractTypeError}, messages=_MESSAGES)


def _on_cpu(name: str) -> Relation:
    return Relation(
        name=f"{name}_on_cpu", require=f"{name}.device.type == 'cpu'", values={"got": f"{name}.device"},
        message=f"ExpectedTokens.{name} must be a 1-D int64 CPU tensor, got a tensor on {{got}}",
        why="The snapshot is taken on the host before the forward and checked there: a device tensor would "
            "cost a device sync every forward to check.",
        fix="Build it with `ExpectedTokens.from_lists` (or `torch.tensor(..., dtype=torch.int64)` on the CPU).",
        breaks={name: f"{name}.to('meta')"})


class ExpectedTokensContract(Contract):
    """``ExpectedTokens(flat=..., lens=...)``: each row's token ids, back to back, and each row's count."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "ExpectedTokens", "B", "The host snapshot of each row's own token ids, for the VERIFY_TOKEN check",
        rules=(
            _on_cpu("flat"),
            _on_cpu("lens"),
            Relation(
                name="lens_non_negative", require="lens.shape[0] == 0 or int(lens.min()) >= 0",
                values={"least": "int(lens.min())"},
                message="ExpectedTokens.lens must be >= 0 (tokens per row), got {least}",
                why="Each length counts a row's tokens; a negative count describes no snapshot.",
                fix="Pass each row's token count (0 for a padding row).",
                breaks={"lens": torch.tensor([-1, 1, 0])}),  # still summing to the example's 0 tokens
            Relation(
                name="lens_sum_to_flat", require="int(lens.sum()) == flat.numel()", over=("lens", "flat"),
                error=ContractRuntimeError, values={"total": "int(lens.sum())", "numel": "flat.numel()"},
                message="cumsum(req_all_ids_lens)={total} != req_all_ids_flat.numel()={numel}; snapshot inconsistent",
                why="flat holds the rows' ids back to back; lengths that do not add up to its size would read "
                    "another row's ids as this row's.",
                fix="Build flat and lens from the same rows (`ExpectedTokens.from_lists`).",
                breaks={"flat": torch.zeros(2, dtype=torch.int64)}),
        ),
    )

    flat: Annotated[torch.Tensor, _host("ExpectedTokens.flat")] = Field(
        description="The rows' token ids concatenated in row order (int64, CPU).")
    lens: Annotated[torch.Tensor, _host("ExpectedTokens.lens")] = Field(
        description="Each row's token count (int64, CPU; 0 for a padding row).")


check_expected_tokens = ExpectedTokensContract.checker()

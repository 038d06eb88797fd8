"""Contract of ``SweepEntries(...).validate()``: one host entry per cached slot, three tensors of one length.

The sweep runner checks its input before every sweep, on the host: shapes and dtypes only.
"""

from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.errors import FAMILY
from kvcanary_contracts import Contract, ContractInfo, TensorArg

_ENTRY = "{name} must be 1-D int64"
_MESSAGES = {"dtype": _ENTRY + ", got dtype {actual}", "rank": _ENTRY + ", got shape {shape}",
             "size": _ENTRY + " of length {expected} (SweepEntries.slots'), got length {actual}"}


def _entries(label: str) -> TensorArg:
    return TensorArg(dtype=torch.int64, shape=("n",), contiguous=False, same_device=False, label=label,
                     messages=_MESSAGES)


class SweepEntriesContract(Contract):
    """``SweepEntries(slots=..., positions=..., prev_slots=...)``: the cached slots one sweep verifies."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "SweepEntries", "B", "The cached slots one sweep verifies: each slot, its position, its predecessor")

    slots: Annotated[torch.Tensor, _entries("SweepEntries.slots")] = Field(
        description="Each cached slot, in full-pool slot space.")
    positions: Annotated[torch.Tensor, _entries("SweepEntries.positions")] = Field(
        description="Each slot's position in its chain.")
    prev_slots: Annotated[torch.Tensor, _entries("SweepEntries.prev_slots")] = Field(
        description="Each slot's predecessor in its chain (-1: the chain's head).")


check_sweep_entries = SweepEntriesContract.checker()

"""Contract of ``CanaryBatch.validate(device)``: the batch lives on the manager's (the pool's) device.

The manager calls it before each forward; the batch's own rules already ran when it was built.
"""

from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.errors import FAMILY
from kvcanary.manager.batch import CanaryBatch
from kvcanary_contracts import Contract, ContractInfo, ContractTypeError, Relation, ScalarArg

_TYPE = {"type": ContractTypeError}


class CanaryBatchValidate(Contract):
    """``CanaryBatch.validate(self=batch, device=...)``, i.e. ``batch.validate(device)``."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "CanaryBatch.validate", "B", "The batch is on the pool's device, where the manager stages it",
        rules=(
            Relation(
                name="on_pool_device", require="self.req_pool_indices.device == device",
                values={"got": "self.req_pool_indices.device"},
                message="CanaryBatch must be on the pool's device {device}, got {got}",
                why="The manager copies the batch into buffers on the pool's device with device operations "
                    "only; a batch elsewhere would make each of those copies a host transfer, and a sync.",
                fix="Build the batch from the engine's forward tensors, which live with the pool.",
                breaks={"device": torch.device("meta")}),
        ),
    )

    self: Annotated[CanaryBatch, ScalarArg(CanaryBatch, label="batch", errors=_TYPE)] = Field(
        description="The forward's batch.")
    device: Annotated[torch.device, ScalarArg(torch.device, label="device", errors=_TYPE)] = Field(
        description="The pool's device (the manager's).")


check_batch_device = CanaryBatchValidate.checker()

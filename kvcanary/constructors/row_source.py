"""Contract of ``make_row_source(layer_buffer, mode, name=...)``: the real-KV source over a layer buffer's rows.

The source is a view of the live buffer (a copy would fingerprint a stale snapshot), so the buffer must be
contiguous. The manager makes one per group's layer-0 K and V buffers at attach, and the layer rotation one
per listed layer buffer.
"""

from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.consts import RealKvHashMode
from kvcanary.errors import FAMILY
from kvcanary_contracts import Contract, ContractInfo, ContractTypeError, Relation, ScalarArg, TensorArg

_TYPE = {"type": ContractTypeError}


class MakeRowSourceContract(Contract):
    """``make_row_source(layer_buffer=..., mode=..., name=...)``."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "make_row_source", "M", "The real-KV source over a [num_slots, ...] layer buffer's rows",
        rules=(
            Relation(
                name="layer_buffer_contiguous", require="layer_buffer.is_contiguous()", over=("layer_buffer",),
                values={"buffer": "name"},
                message="{buffer} must be contiguous (the fingerprint reads the live buffer through a view)",
                why="The source reads each slot's row through a byte view of the live buffer; a strided buffer "
                    "has no such view, and a copy would fingerprint a stale snapshot.",
                fix="Pass the engine's pool buffer itself (one contiguous row per slot), not a strided view of it.",
                breaks={"layer_buffer": "layer_buffer.transpose(1, 2)"}),
        ),
    )

    layer_buffer: Annotated[torch.Tensor, TensorArg(min_rank=1, contiguous=False, same_device=False,
                                                    label="layer_buffer")] = Field(
        description="A layer's K or V buffer of a group, [num_slots, ...], slot 0 the padding slot.")
    mode: Annotated[RealKvHashMode, ScalarArg(RealKvHashMode, label="mode", errors=_TYPE)] = Field(
        description="How much of each row the fingerprint covers (NONE: no source).")
    name: Annotated[str, ScalarArg(str, label="name", errors=_TYPE)] = Field(
        description="The buffer's name in the messages (FULL k_layer0, SWA layers[3], ...).")


check_row_source = MakeRowSourceContract.checker()

"""The fold operation: the tensor-parallel digest of canary records, ``launch_digest_fold_kernel``.

Adds ``(Σ mix(slot, token, position, prev_hash), count)`` over the records at ``slots`` (entries <= 0, the
padding slot and skipped tokens, left out) to an ``int64 [2]`` accumulator on the device; the mix is
splitmix64 of the slot salted, then of each field in turn, the sum wraps. A slot past the buffer is counted
with its fields read as 0 and nothing is read for it. No device value is read on the host, so the launch
can run inside a captured CUDA graph (see :mod:`kvcanary.distributed.digest`).
"""

from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.consts import CANARY_SLOT_BYTES
from kvcanary.errors import FAMILY
from kvcanary.operation import Operation
from kvcanary.ops import _calls as c
from kvcanary_contracts import Contract, ContractInfo, Relation, TensorArg
from kvcanary_contracts.examples import ExampleSet, Variant
from kvcanary_contracts.mutations import Misalign, PadStride, Strided

INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
"""What the records and the slots may be viewed as: the records are bytes, a slot any integer."""


class FoldLaunch(Contract):
    """Add the digest of the records at ``slots`` to ``acc``."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "launch_digest_fold_kernel", "D",
        "Add the digest of the records at the given slots (slot, token, position, prev_hash) to an int64 [2] "
        "accumulator.",
        device_key="canary_buf",
        writes=("acc",),
        constants={"CANARY_SLOT_BYTES": CANARY_SLOT_BYTES},
        rules=(
            Relation(
                name="canary_buf_rows_are_records",
                require="row_words * canary_buf.element_size() == CANARY_SLOT_BYTES",
                message="canary_buf rows must hold one {record_bytes}-byte record, got {row_bytes} bytes "
                "({row_words} x {dtype})",
                values={"record_bytes": "CANARY_SLOT_BYTES", "row_bytes": "row_words * canary_buf.element_size()",
                        "dtype": "canary_buf.dtype"},
                why="The fold reads token, position and prev_hash as the first three int64 words of each row; a row "
                "of another size is not a canary record.",
                fix="Pass the canary buffer itself (`[num_slots, 32]` bytes), or a view of it as wider integers "
                "(`buf.view(torch.int64)`: 4 words a row).",
                breaks={"row_words": 40},
            ),
            Relation(
                name="canary_buf_row_contiguous",
                require="row_words == 1 or canary_buf.stride(1) == 1",
                message="canary_buf rows must be contiguous, got strides {strides}",
                values={"strides": "tuple(canary_buf.stride())"},
                why="Each record's 32 bytes are read as consecutive int64 words.",
                fix="Pass rows whose bytes are adjacent (slicing whole rows, or the leading bytes of wider rows, "
                "keeps them so).",
                breaks={"canary_buf": Strided(1, 2)},
            ),
            Relation(
                name="canary_buf_row_stride_whole_words",
                require="(canary_buf.stride(0) * canary_buf.element_size()) % 8 == 0",
                message="canary_buf rows must be a whole number of int64 words apart, got a row stride of "
                "{stride_bytes} bytes",
                values={"stride_bytes": "canary_buf.stride(0) * canary_buf.element_size()"},
                why="Rows are addressed in int64 words: a row stride that is not a multiple of 8 bytes misaligns "
                "every other record.",
                fix="Use a buffer whose rows are 32 bytes (or a multiple of 8 bytes) apart.",
                breaks={"canary_buf": PadStride(0, 4)},
            ),
            Relation(
                name="canary_buf_aligned",
                require="canary_buf.data_ptr() % 8 == 0",
                message="canary_buf must start on an 8-byte boundary, got data_ptr() % 8 == {misalignment}",
                values={"misalignment": "canary_buf.data_ptr() % 8"},
                why="Records are read as aligned int64 words.",
                fix="Pass the buffer as allocated (or a view starting at a row boundary).",
                breaks={"canary_buf": Misalign(4)},
            ),
        ),
    )

    acc: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=(2,))] = Field(
        description="The accumulator the fold adds to: (wrapping sum of the records' mixes, record count).")
    canary_buf: Annotated[torch.Tensor, TensorArg(dtype=INTEGER_DTYPES, shape=("num_slots", "row_words"),
                                                  contiguous=False)] = Field(
        description="The canary records, one per row (32 bytes, as any integer dtype); rows may be farther apart.")
    slots: Annotated[torch.Tensor, TensorArg(dtype=INTEGER_DTYPES, shape=("n",), contiguous=False)] = Field(
        description="The slots to fold (entries <= 0 are left out; a slot past the buffer folds zeros).")


EXAMPLES = ExampleSet("launch_digest_fold_kernel", (Variant("one step's slots", lambda: {
    "acc": c.i64(2), "canary_buf": torch.zeros(c.NUM_SLOTS, CANARY_SLOT_BYTES, dtype=torch.uint8),
    "slots": c.i64(c.NUM_TOKENS)}),))


def valid_call(device: c.Device = "cpu", *, num_slots: int = 16, n: int = 6) -> c.Call:
    """A small valid fold of ``n`` slots of a buffer of ``num_slots`` zero records."""
    return {"acc": c.i64(2, device=device),
            "canary_buf": torch.zeros(num_slots, CANARY_SLOT_BYTES, dtype=torch.uint8, device=device),
            "slots": c.i64(n, device=device)}


FOLD = OPERATION = Operation(
    "fold", FoldLaunch, constant="FOLD", module="kvcanary.launch.fold",
    doc="""Add ``(Σ mix(slot, token, position, prev_hash), count)`` over the records at ``slots`` to ``acc``.

    Order-free (a wrapping sum), no host read, capturable on every backend that serves it.""",
    examples=EXAMPLES, call=valid_call,
)
launch_digest_fold_kernel = OPERATION.launcher

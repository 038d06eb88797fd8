"""Contracts of the distributed package's arguments: ``Wire(backend=..., device=...)``, ``TransferStart(...)``
(where a transferred run starts in its request's chain) and ``entries(values, name, device, num_slots)`` (a
run of slots or tokens a transfer names).

A run is a host sequence of integers (each fits in int64) or a 1-D integer tensor; slots that are written or
gathered must lie in ``[1, num_slots)`` (slot 0 is the padding slot) and be distinct (one request's positions).
Slots already on a device are read back once, and only when ``num_slots`` is given (a transfer is a host event:
its send or receive blocks anyway): :func:`kvcanary.distributed.slots.entries` checks the host copy.
"""

import abc
import operator
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar

import torch
from pydantic import Field

from kvcanary.constructors._settings import count, setting, settings_contract, validator
from kvcanary.constructors.pool import _Helper
from kvcanary.errors import FAMILY
from kvcanary_contracts import Contract, ContractInfo, ContractTypeError, Relation, ScalarArg

BACKENDS = ("gloo", "nccl")
"""The process-group backends kvcanary's transfers and digests run over."""

WireContract = settings_contract(
    "Wire", "T", "Point-to-point transport of transfer messages over a process group.", {
        "backend": setting(str, "The process group's backend: gloo (CPU, or CUDA staged through the host) or nccl."),
        "device": setting(torch.device, "The device the KV lives on (messages arrive there).",
                          messages={"type": "{name} must be a torch.device, got {type}"}),
    },
    rules=(
        Relation(
            name="backend_known", require="backend in BACKENDS",
            message="backend must be 'gloo' or 'nccl', got {backend!r}",
            why="kvcanary's transfers and digests run over gloo (CPU, or CUDA tensors staged through the host) or "
                "NCCL (GPU to GPU); no other backend is tested.",
            fix="Pass 'gloo' or 'nccl' (the backend the process group was initialised with).",
            breaks={"backend": "'mpi'"}),
    ),
    constants={"BACKENDS": BACKENDS}, qualified=False)

TransferStartContract = settings_contract(
    "TransferStart", "T", "Where a transferred run starts in its request's chain.", {
        "first_position": count(
            "The position of the run's first slot in its request.", minimum=0,
            why="Positions count a request's tokens from 0; a negative one names no token.",
            fix="Pass the position of the first transferred token (0 for a whole request).",
            message="{label} must be >= 0, got {{{name}}}"),
        "prev_slot": setting(int, "The receiver's slot of position first_position - 1 (-1: the run is a chain "
                                  "head)."),
    },
    rules=(
        Relation(
            name="head_has_no_predecessor", require="first_position != 0 or prev_slot == -1",
            message="prev_slot must be -1 when first_position is 0 (a chain head)",
            why="A record at position 0 starts its request's chain: it links to no slot, and the verify checks "
                "that it does not.",
            fix="Pass prev_slot=-1 (the default) for a run that starts at position 0.",
            breaks={"prev_slot": 7}),
        Relation(
            name="suffix_names_predecessor", require="prev_slot > 0", when="first_position > 0",
            over=("prev_slot", "first_position"), values={"before": "first_position - 1"},
            message="prev_slot must name the slot of position {before}, got {prev_slot}",
            why="A run that starts past position 0 continues a chain the receiver already holds: the first "
                "record links to the receiver's slot of the position before it (slot 0 is padding).",
            fix="Pass the receiver's slot of position first_position - 1, or send the run from position 0.",
            breaks={"first_position": 2}),
    ),
    qualified=False)

validate_transfer_start = validator(TransferStartContract)


class Run(abc.ABC):  # noqa: B024 - a type for isinstance only: it declares no methods
    """A run of slots or tokens: a 1-D integer tensor on any device, or a host sequence (not a str or bytes)."""

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        return issubclass(other, torch.Tensor) or (issubclass(other, Sequence)
                                                    and not issubclass(other, (str, bytes, bytearray)))


def is_integer_dtype(dtype: torch.dtype) -> bool:
    """Whether ``dtype`` holds integers (not a float, a complex or a bool)."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def first_non_integer(values: Sequence[Any]) -> int:
    """The index of the first entry of ``values`` that is no integer (a bool is none), or -1."""
    for i, v in enumerate(values):
        if isinstance(v, bool):
            return i
        try:
            operator.index(v)
        except TypeError:
            return i
    return -1


INT64 = (-(2**63), 2**63 - 1)
"""The range an entry must fit: runs become int64 tensors."""


def first_outside_int64(values: Sequence[Any]) -> int:
    """The index of the first integer entry of ``values`` outside int64, or -1 (run after the integer rule)."""
    for i, v in enumerate(values):
        if not INT64[0] <= operator.index(v) <= INT64[1]:
            return i
    return -1


def first_repeat(values: Sequence[int] | torch.Tensor) -> int:
    """The index of the first entry of ``values`` equal to an earlier one, or -1 (a tensor is read on the host:
    :func:`~kvcanary.distributed.slots.entries` hands the contract a host copy of a device run)."""
    seen: set[int] = set()
    items = values.tolist() if isinstance(values, torch.Tensor) else [operator.index(v) for v in values]
    for i, v in enumerate(items):
        if v in seen:
            return i
        seen.add(v)
    return -1


def bounds(values: Sequence[int] | torch.Tensor) -> tuple[int, int]:
    """``(min, max)`` of a non-empty run (one read-back for a tensor on a device)."""
    if isinstance(values, torch.Tensor):
        lo, hi = torch.stack(torch.aminmax(values.to(torch.int64))).tolist()
        return int(lo), int(hi)
    ints = [operator.index(v) for v in values]
    return min(ints), max(ints)


def in_slot_range(values: Sequence[int] | torch.Tensor, num_slots: int) -> bool:
    """Whether every slot of ``values`` lies in ``[1, num_slots)`` (an empty run does)."""
    if len(values) == 0:
        return True
    lo, hi = bounds(values)
    return lo >= 1 and hi < num_slots


def as_float_tensor(values: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """The run as a float32 tensor: how the catalog breaks the integer rule."""
    return torch.as_tensor(values, dtype=torch.float32)

_TYPE = {"type": ContractTypeError}


class EntriesContract(Contract):
    """``entries(values=..., name=..., device=..., num_slots=...)``: a run of slots (``num_slots`` given) or of
    tokens, as a 1-D int64 tensor on ``device``."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "entries", "T", "A run of slots or tokens a transfer names, as int64 on the device",
        constants={"Tensor": torch.Tensor,
                   "is_integer_dtype": _Helper(is_integer_dtype, "whether a dtype holds integers"),
                   "first_non_integer": _Helper(first_non_integer, "the index of the first entry that is no "
                                                "integer (a bool is none), or -1"),
                   "first_outside_int64": _Helper(first_outside_int64, "the index of the first entry outside "
                                                  "int64, or -1"),
                   "first_repeat": _Helper(first_repeat, "the index of the first entry equal to an earlier one, "
                                           "or -1"),
                   "bounds": _Helper(bounds, "(min, max) of the run"),
                   "in_slot_range": _Helper(in_slot_range, "whether every slot lies in [1, num_slots)"),
                   "as_float_tensor": _Helper(as_float_tensor, "the run as a float32 tensor")},
        rules=(
            Relation(
                name="tensor_is_1d_integer", require="values.ndim == 1 and is_integer_dtype(values.dtype)",
                when="isinstance(values, Tensor)", over=("values",),
                values={"setting": "name", "dtype": "values.dtype", "shape": "tuple(values.shape)"},
                message="{setting} must be a 1-D integer tensor, got {dtype} of shape {shape}",
                why="Each entry is a slot number or a token id: an integer, one per transferred position.",
                fix="Pass a 1-D int32 or int64 tensor (or a list of ints).",
                breaks={"values": "as_float_tensor(values)"}),
            Relation(
                name="items_are_integers", require="first_non_integer(values) < 0",
                when="not isinstance(values, Tensor)", over=("values",),
                values={"setting": "name", "i": "first_non_integer(values)",
                        "got": "type(values[first_non_integer(values)]).__name__"},
                message="{setting}[{i}] must be an integer, got {got}",
                why="Each entry is a slot number or a token id; a float or a bool would be read as one silently.",
                fix="Pass Python ints (or a 1-D integer tensor).",
                breaks={"values": "[*values, 2.5]"}),
            Relation(
                name="items_fit_int64", require="first_outside_int64(values) < 0",
                when="not isinstance(values, Tensor)", over=("values",),
                values={"setting": "name", "i": "first_outside_int64(values)",
                        "got": "values[first_outside_int64(values)]"},
                message="{setting}[{i}] must fit in int64 ([-2**63, 2**63)), got {got}",
                why="A run becomes an int64 tensor (slot numbers and token ids are int64 on the device); a larger "
                    "integer has no such value.",
                fix="Pass the real slot numbers or token ids (a value this large is a caller's bug).",
                breaks={"values": "[*values, 2**70]", "name": "'tokens'", "num_slots": "None"}),
            Relation(
                name="slots_in_range", require="in_slot_range(values, num_slots)", when="num_slots is not None",
                over=("values", "num_slots"),
                values={"setting": "name", "lo": "bounds(values)[0]", "hi": "bounds(values)[1]"},
                message="{setting} must hold slots in [1, {num_slots}) (slot 0 is the padding slot), got values in "
                        "[{lo}, {hi}]",
                why="The slots index the KV and canary buffers: slot 0 is the padding slot engines point unused "
                    "entries at, and a slot past the buffer is out of bounds.",
                fix="Pass the request's slots (from its block table), each in [1, num_slots).",
                breaks={"values": "[0, *values]"}),
            Relation(
                name="slots_distinct", require="first_repeat(values) < 0", when="num_slots is not None",
                over=("values", "num_slots"),
                values={"setting": "name", "i": "first_repeat(values)",
                        "slot": "int(values[first_repeat(values)])"},
                message="{setting} must hold distinct slots: {setting}[{i}] repeats slot {slot}",
                why="A run holds one request's positions, each in its own slot: a repeated slot would write two "
                    "positions' KV and records to one place (the later wins; on CUDA index_copy_ with repeated "
                    "indices is undefined), and the verify would then blame the transport.",
                fix="Pass the request's slots from its block table, one per transferred position.",
                breaks={"values": "[*values, values[0]]"}),
        ),
    )

    values: Annotated[object, ScalarArg(Run, label="values", errors=_TYPE, messages={
        "type": "slots or tokens must be a sequence of integers or a 1-D integer tensor, got {type}"})] = Field(
        description="The run: a host sequence of integers, or a 1-D integer tensor on any device.")
    name: Annotated[str, ScalarArg(str, label="name", errors=_TYPE)] = Field(
        description="The argument's name, for the messages (slots, tokens).")
    device: Annotated[torch.device, ScalarArg(torch.device, label="device", errors=_TYPE)] = Field(
        description="Where the run is wanted (a tensor elsewhere is moved, never read back for that).")
    num_slots: Annotated[int | None, ScalarArg(int, label="num_slots", optional=True)] = Field(
        description="The buffers' slots, for a run of slots (None: a run of tokens, no range).")


check_wire = WireContract.checker()
check_entries = EntriesContract.checker()

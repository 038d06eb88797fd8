"""A toy contract family for testing the framework without kvcanary."""


from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary_contracts import (
    AllOrNone,
    CodeBook,
    Contract,
    ContractInfo,
    ContractTypeError,
    Family,
    ForbiddenUnless,
    ItemsArg,
    Relation,
    RequiredIf,
    RequiredWhen,
    ScalarArg,
    StructArg,
    TensorArg,
)

BOOK = CodeBook(Path(__file__).with_name("toy_codebook.json"), "TOY")
FAMILY = Family(name="toy", prefix="toy: ", codebook=BOOK)


@dataclass
class Src:
    tensor: torch.Tensor
    width: int


@dataclass
class Plan:
    idx: torch.Tensor
    count: torch.Tensor
    scratch: torch.Tensor | None = None


class ToyLaunch(Contract):
    """A launch with every kind of rule."""

    contract: ClassVar[ContractInfo] = ContractInfo(
        name="toy_launch", family=FAMILY, letter="T", summary="toy launch", device_key="buf",
        constants={"MAX_BS": 8},
        rules=(
            AllOrNone(fields=("lo", "hi"), why="a range needs both ends", fix="pass both or neither"),
            RequiredIf(flag="check", fields=("expected",), message="expected is required when check=True",
                       why="nothing to compare with", fix="pass expected"),
            ForbiddenUnless(flag="check", fields=("expected",), why="it would be ignored", fix="drop it"),
            RequiredWhen(when="window > 0", fields=("lut",), why="the window translates slots", fix="pass lut"),
            Relation(name="window_non_negative", require="window >= 0", message="window must be >= 0, got {window}",
                     why="a count", fix="pass 0 or more"),
            Relation(name="cap_matches", require="cap == plan_cap", message="cap={cap} but plan holds {plan_cap}",
                     why="overflow decisions use cap", fix="pass the plan's capacity"),
            Relation(name="stride_fits", require="stride >= 32", message="stride must hold 4 words, got {words}",
                     values={"words": "stride // 8"}, why="records are 32 bytes", fix="use 32"),
            Relation(name="bs_limit", require="bs <= MAX_BS", message="bs={bs} exceeds {MAX_BS}",
                     why="one block", fix="split"),
        ),
    )

    buf: Annotated[torch.Tensor, TensorArg(dtype=torch.uint8, shape=("slots", "stride"))] = Field(description="buffer")
    plan: Annotated[Plan, StructArg(Plan, {
        "idx": TensorArg(dtype=torch.int64, shape=("plan_cap",), doc="indices"),
        "count": TensorArg(dtype=(torch.int32, torch.int64), shape=(1,), doc="count"),
        "scratch": TensorArg(dtype=torch.int64, shape=(">= plan_cap + 1",), optional=True, doc="scratch"),
    }, prefix="plan.")] = Field(description="plan")
    sources: Annotated[tuple[Src, ...], ItemsArg(StructArg(Src, {
        "tensor": TensorArg(shape=("*", "*"), messages={"rank": "{name} (viewed as uint8) must be 2-D, got {ndim}-D"},
                            doc="bytes"),
        "width": ScalarArg(int, doc="width"),
    }, rules=(Relation(name="wide_enough", require="tensor.shape[1] >= width", message="{name} narrower than {width}",
                       why="strips fit", fix="widen"),)), max_len=2,
        messages={"max_len": "at most {max_len} sources, got {actual}"})] = Field(description="sources")
    x: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=("bs",), errors={"dtype": ContractTypeError})] = Field(
        description="x")
    y: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=("bs + 1",))] = Field(description="y")
    lo: Annotated[torch.Tensor | None, TensorArg(dtype=torch.int64, shape=("n",))] = Field(description="lo")
    hi: Annotated[torch.Tensor | None, TensorArg(dtype=torch.int64, shape=("n",))] = Field(description="hi")
    expected: Annotated[torch.Tensor | None, TensorArg(dtype=torch.int64, shape=("bs",))] = Field(description="e")
    lut: Annotated[torch.Tensor | None, TensorArg(dtype=torch.int64, shape=(">= 1",))] = Field(description="lut")
    check: Annotated[bool, ScalarArg(bool)] = Field(description="flag")
    window: Annotated[int, ScalarArg(int)] = Field(description="window")
    cap: Annotated[int, ScalarArg(int)] = Field(description="cap")


def valid(**over: object) -> dict[str, object]:
    """A valid call, with overrides."""
    call: dict[str, object] = {
        "buf": torch.zeros(6, 32, dtype=torch.uint8),
        "plan": Plan(torch.zeros(5, dtype=torch.int64), torch.zeros(1, dtype=torch.int32)),
        "sources": (Src(torch.zeros(3, 16, dtype=torch.uint8), 16),),
        "x": torch.zeros(3, dtype=torch.int64),
        "y": torch.zeros(4, dtype=torch.int64),
        "lo": None, "hi": None, "expected": None, "lut": None,
        "check": False, "window": 0, "cap": 5,
    }
    call.update(over)
    return call

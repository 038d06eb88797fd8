"""Contract layouts an operator schema cannot carry are refused when the signature is built, naming the field."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar

import pytest
import torch
from pydantic import Field

from kvcanary_contracts import (
    CodeBook,
    Contract,
    ContractDefinitionError,
    ContractError,
    ContractInfo,
    Family,
    ItemsArg,
    ScalarArg,
    StructArg,
    TensorArg,
)
from kvcanary_contracts.torch_op import OpSignature

FAMILY = Family(name="op-toy", prefix="toy: ", codebook=CodeBook(Path("/nonexistent/op-toy.json"), "OT"))


@dataclass
class Item:
    t: torch.Tensor
    n: int


@dataclass
class Inner:
    n: int


@dataclass
class Outer:
    inner: Inner


ITEMS = ItemsArg(StructArg(Item, {"t": TensorArg(dtype=torch.int64, doc="t"), "n": ScalarArg(int, doc="n")}))


class OptionalItems(Contract):
    contract: ClassVar[ContractInfo] = ContractInfo(name="optional_items", family=FAMILY, letter="O", summary="s")
    x: Annotated[torch.Tensor, TensorArg(dtype=torch.int64)] = Field(description="x")
    items: Annotated[tuple[Item, ...] | None, ITEMS] = Field(default=None, description="items")


class NestedInOptional(Contract):
    contract: ClassVar[ContractInfo] = ContractInfo(name="nested_in_optional", family=FAMILY, letter="N",
                                                    summary="s")
    x: Annotated[torch.Tensor, TensorArg(dtype=torch.int64)] = Field(description="x")
    outer: Annotated[Outer | None, StructArg(Outer, {"inner": StructArg(Inner, {"n": ScalarArg(int, doc="n")}, doc="inner")})] = Field(
        default=None, description="outer")


class Plain(Contract):
    contract: ClassVar[ContractInfo] = ContractInfo(name="plain_items", family=FAMILY, letter="P", summary="s")
    x: Annotated[torch.Tensor, TensorArg(dtype=torch.int64)] = Field(description="x")
    items: Annotated[tuple[Item, ...], ITEMS] = Field(description="items")


def test_an_optional_collection_is_refused() -> None:
    with pytest.raises(ContractDefinitionError, match="items: an optional collection"):
        OpSignature(OptionalItems)


def test_a_struct_inside_an_optional_struct_is_refused() -> None:
    with pytest.raises(ContractDefinitionError, match="outer: an optional struct holding a struct"):
        OpSignature(NestedInOptional)


def test_a_required_collection_flattens_to_one_list_per_attribute() -> None:
    sig = OpSignature(Plain)
    assert [(a.name, a.listed) for a in sig.args] == [("x", False), ("items__t", True), ("items__n", True)]


def test_the_checker_of_a_struct_inside_an_optional_struct_allows_its_absence() -> None:
    """Eager checking still supports the layout the operator refuses: absent is fine, a bad value is named."""
    check = NestedInOptional.checker()
    x = torch.zeros(2, dtype=torch.int64)
    check(x=x, outer=None)
    check(x=x, outer=Outer(Inner(3)))
    with pytest.raises(ContractError, match=r"outer\.inner\.n must be int"):
        check(x=x, outer=Outer(Inner("a")))  # type: ignore[arg-type]

"""Declaration-time rules of the framework: documented rules only, known names only, stable codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, ClassVar

import pytest
import torch
from pydantic import Field

from kvcanary_contracts import CodeBook, Contract, ContractDefinitionError, ContractInfo, Dim, Expr, Relation, TensorArg
from tests.contracts.toy import FAMILY, ToyLaunch


def test_rule_without_explanation_cannot_be_declared() -> None:
    with pytest.raises(ContractDefinitionError, match="why"):
        Relation(name="r", require="x > 0", message="m", fix="f")
    with pytest.raises(ContractDefinitionError, match="name"):
        Relation(require="x > 0", message="m", why="w", fix="f")


def test_field_without_description_is_refused() -> None:
    class NoDoc(Contract):
        contract: ClassVar[ContractInfo] = ContractInfo(name="nodoc", family=FAMILY, letter="N", summary="s")
        t: Annotated[torch.Tensor, TensorArg()]

    with pytest.raises(ContractDefinitionError, match="description"):
        NoDoc.compiled()


def test_unknown_name_in_expression_is_refused() -> None:
    class BadName(Contract):
        contract: ClassVar[ContractInfo] = ContractInfo(
            name="badname", family=FAMILY, letter="N", summary="s",
            rules=(Relation(name="r", require="nope > 0", message="m", why="w", fix="f"),))
        t: Annotated[torch.Tensor, TensorArg()] = Field(description="t")

    with pytest.raises(ContractDefinitionError, match="nope"):
        BadName.compiled()


def test_dim_parsing() -> None:
    assert Dim.parse(None).kind == "any" and Dim.parse("*").kind == "any"
    assert Dim.parse(4).kind == "const" and Dim.parse(4).value == 4
    assert Dim.parse("bs").kind == "symbol"
    d = Dim.parse("bs + 1")
    assert d.kind == "symbol" and d.expr is not None and d.expr.simple_symbol == ("bs", 1)
    assert Dim.parse("bs - 2").expr.simple_symbol == ("bs", -2)  # type: ignore[union-attr]
    assert Dim.parse(">= 4097").kind == "min"
    assert Dim.parse("2 * bs").kind == "expr"
    assert Expr.parse("a + b * len(c)").names == frozenset({"a", "b", "c"})


def test_origin_points_at_the_declaring_module() -> None:
    origins = {c.origin.split(":")[0] for c in ToyLaunch.checks()}
    assert origins == {"tests.contracts.toy"}


def test_slugs_are_unique_and_codes_placeholder_until_booked(tmp_path: Path) -> None:
    checks = ToyLaunch.checks()
    slugs = [c.slug for c in checks]
    assert len(slugs) == len(set(slugs))
    assert all(c.code == "TOY-T???" for c in checks)
    book = CodeBook(tmp_path / "book.json", "TOY")
    added = book.update(("toy_launch", s, "T") for s in slugs)
    assert len(added) == len(slugs)
    book.save()
    again = CodeBook(tmp_path / "book.json", "TOY")
    assert again.codes == book.codes
    assert sorted(book.codes.values())[0] == "TOY-T001"


def test_codebook_never_renumbers_and_retires(tmp_path: Path) -> None:
    book = CodeBook(tmp_path / "b.json", "X")
    book.update([("c", "a", "A"), ("c", "b", "A")])
    assert book.codes == {"c/a": "X-A001", "c/b": "X-A002"}
    book.update([("c", "b", "A"), ("c", "z", "A")])  # "a" vanished, "z" is new
    assert book.codes == {"c/b": "X-A002", "c/z": "X-A003"}
    assert book.retired == {"c/a": "X-A001"}
    book.update([("c", "a", "A"), ("c", "b", "A"), ("c", "z", "A")])  # "a" is back with its old code
    assert book.codes["c/a"] == "X-A001"
    book.save()
    assert json.loads((tmp_path / "b.json").read_text())["format"] == "contracts-codebook/1"

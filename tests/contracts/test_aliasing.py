"""The framework's generated checks beyond the specs: written tensors may not overlap other arguments (byte
ranges), ints must be no bools and fit in int64. A toy contract, no kvcanary."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
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
from kvcanary_contracts.compiler import Span, first_overlap

FAMILY = Family(name="alias-toy", prefix="toy: ", codebook=CodeBook(Path("/nonexistent/alias-toy.json"), "AT"))


@dataclass
class Out:
    rows: torch.Tensor
    count: torch.Tensor


@dataclass
class Src:
    tensor: torch.Tensor


class AliasToy(Contract):
    """Writes ``out.rows`` (declared in the contract), ``out.count`` and ``flag`` (``writes=True``)."""

    contract: ClassVar[ContractInfo] = ContractInfo(name="alias_toy", family=FAMILY, letter="T", summary="toy",
                                                    device_key="x", writes=("out.rows",))

    x: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=("n",))] = Field(description="read")
    y: Annotated[torch.Tensor | None, TensorArg(dtype=torch.int64, shape=("n",))] = Field(description="read")
    out: Annotated[Out, StructArg(Out, {
        "rows": TensorArg(dtype=torch.int64, shape=("m", 4), doc="written"),
        "count": TensorArg(dtype=torch.int32, shape=(1,), writes=True, doc="written"),
    }, prefix="out.")] = Field(description="outputs")
    flag: Annotated[torch.Tensor, TensorArg(dtype=torch.int32, shape=(1,), writes=True)] = Field(description="w")
    srcs: Annotated[tuple[Src, ...], ItemsArg(StructArg(Src, {
        "tensor": TensorArg(shape=("*", "*"), contiguous=False, doc="bytes")}))] = Field(description="read")
    k: Annotated[int, ScalarArg(int)] = Field(description="an int")


check = AliasToy.checker()


def call(**over: Any) -> dict[str, Any]:
    kw: dict[str, Any] = {"x": torch.zeros(3, dtype=torch.int64), "y": None,
                          "out": Out(torch.zeros(2, 4, dtype=torch.int64), torch.zeros(1, dtype=torch.int32)),
                          "flag": torch.zeros(1, dtype=torch.int32), "srcs": (), "k": 0}
    kw.update(over)
    return kw


def rejected(kw: dict[str, Any]) -> ContractError:
    with pytest.raises(ContractError) as info:
        check(**kw)
    assert info.value.check.kind == "aliasing", info.value
    return info.value


def test_written_tensors_may_not_overlap_anything() -> None:
    check(**call())
    flag = torch.zeros(1, dtype=torch.int32)
    err = rejected(call(flag=flag, out=Out(torch.zeros(2, 4, dtype=torch.int64), flag)))
    assert err.message == "toy: out.count and flag share 4 bytes of memory, and the launch writes both"
    rows = torch.zeros(2, 4, dtype=torch.int64)
    err = rejected(call(x=rows.view(-1)[5:8], out=Out(rows, torch.zeros(1, dtype=torch.int32))))
    assert "x" in err.message and "out.rows" in err.message and "writes out.rows" in err.message


def test_reads_may_share_and_disjoint_views_are_fine() -> None:
    x = torch.zeros(3, dtype=torch.int64)
    check(**call(x=x, y=x))  # two reads of one tensor
    buf = torch.zeros(16, dtype=torch.int64)
    out = Out(buf[:8].view(2, 4), buf[8:9].view(torch.int32)[:1])
    check(**call(out=out, flag=buf[9:10].view(torch.int32)[:1], x=buf[10:13]))  # one buffer, no overlap
    empty = torch.zeros(0, dtype=torch.int64)
    check(**call(x=empty, y=empty))


def test_strided_reads_count_their_whole_extent() -> None:
    rows = torch.zeros(2, 4, dtype=torch.int64)
    strided = rows.view(torch.uint8).view(2, 32)[:, ::2]  # every other byte of both rows
    rejected(call(out=Out(rows, torch.zeros(1, dtype=torch.int32)), srcs=(Src(strided),)))
    check(**call(srcs=(Src(torch.zeros(2, 32, dtype=torch.uint8)[:, ::2]),)))


def test_a_range_set_passed_once_is_still_checked_against_a_new_overlap() -> None:
    """The checker remembers range sets it passed; a call that overlaps is never one of them."""
    kw = call()
    for _ in range(3):
        check(**kw)
    rejected(call(x=kw["x"], flag=kw["flag"], out=Out(kw["out"].rows, kw["flag"])))
    check(**kw)


def test_meta_tensors_are_not_compared_in_a_family_that_allows_them() -> None:
    def meta(*shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device="meta")

    assert check(**call(x=meta(3), out=Out(meta(2, 4), meta(1, dtype=torch.int32)),
                        flag=meta(1, dtype=torch.int32))) == torch.device("meta")


def test_ints_must_fit_in_int64_and_not_be_bools() -> None:
    for value, kind in [(True, "bool_as_int"), (2**63, "int64"), (-(2**63) - 1, "int64")]:
        with pytest.raises(ContractError) as info:
            check(**call(k=value))
        assert info.value.check.kind == kind
    check(**call(k=2**63 - 1))
    check(**call(k=-(2**63)))


def test_writes_must_name_tensors_of_the_contract() -> None:
    class Bad(Contract):
        contract: ClassVar[ContractInfo] = ContractInfo(name="bad_writes", family=FAMILY, letter="B", summary="b",
                                                        writes=("nope",))
        x: Annotated[torch.Tensor, TensorArg(dtype=torch.int64)] = Field(description="x")

    with pytest.raises(ContractDefinitionError, match="nope"):
        Bad.checker()


def brute(spans: list[Span]) -> bool:
    """Whether two spans overlap with at least one written (every pair)."""
    live = [s for s in spans if s[0] < s[1]]
    return any((a[2] or b[2]) and a[0] < b[1] and b[0] < a[1] for a, b in itertools.combinations(live, 2))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 12), st.booleans()), max_size=9))
def test_the_sweep_finds_an_overlap_exactly_when_one_exists(raw: list[tuple[int, int, bool]]) -> None:
    spans: list[Span] = [(a, a + n, int(w), i) for i, (a, n, w) in enumerate(raw)]
    hit = first_overlap(list(spans))
    assert (hit is not None) == brute(spans)
    if hit is not None:
        a, b = hit
        assert (a[2] or b[2]) and a[0] < b[1] and b[0] < a[1]
    # the fast test the checker runs first: sorted ends never pass the next start iff nothing overlaps
    live = [s for s in spans if s[0] < s[1]]
    disjoint = not any(a[0] < b[1] and b[0] < a[1] for a, b in itertools.combinations(live, 2))
    starts, ends = sorted(s[0] for s in live), sorted(s[1] for s in live)
    assert disjoint == all(e <= s for e, s in zip(ends, starts[1:], strict=False))
    # with the empty spans in (absent optional tensors, empty tensors) it may only flag more, never less
    starts, ends = sorted(s[0] for s in spans), sorted(s[1] for s in spans)
    assert disjoint or not all(e <= s for e, s in zip(ends, starts[1:], strict=False))

"""The checker's repeat-call path: a call like one that passed (same types, scalars and tensor metadata) runs
only the address checks, and everything else still fails exactly as the whole checker fails it.

Each test first passes a valid call, so the checker remembers its tensors, then changes what a later call
passes, in place where torch allows it (the very same tensor objects), and compares the error with the one
the whole checker (``_check``, the function the fast path falls back to) raises for the same arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

import pytest
import torch
from pydantic import Field

from kvcanary_contracts import (
    CodeBook,
    Contract,
    ContractError,
    ContractInfo,
    Family,
    ItemsArg,
    Relation,
    ScalarArg,
    StructArg,
    TensorArg,
)

FAMILY = Family(name="repeat-toy", prefix="toy: ", codebook=CodeBook(Path("/nonexistent/repeat-toy.json"), "RT"))


@dataclass
class Out:
    rows: torch.Tensor
    count: torch.Tensor


@dataclass
class Src:
    tensor: torch.Tensor
    width: int


class RepeatToy(Contract):
    """Writes ``out``; reads ``x``, ``y`` and the sources; ``x`` must start on a 16-byte boundary."""

    contract: ClassVar[ContractInfo] = ContractInfo(
        name="repeat_toy", family=FAMILY, letter="R", summary="toy", device_key="x", writes=("out.rows", "out.count"),
        rules=(Relation(name="x_aligned", require="x.data_ptr() % 16 == 0", message="x is misaligned by {off}",
                        values={"off": "x.data_ptr() % 16"}, why="vector loads", fix="align x"),
               Relation(name="k_small", require="k <= 8", message="k={k} exceeds 8", why="one block", fix="split")))

    x: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=("n",))] = Field(description="read")
    y: Annotated[torch.Tensor | None, TensorArg(dtype=torch.int64, shape=("n",))] = Field(description="read")
    out: Annotated[Out, StructArg(Out, {
        "rows": TensorArg(dtype=torch.int64, shape=("m", 4), doc="written"),
        "count": TensorArg(dtype=torch.int32, shape=(1,), doc="written"),
    }, prefix="out.")] = Field(description="outputs")
    srcs: Annotated[tuple[Src, ...], ItemsArg(StructArg(Src, {
        "tensor": TensorArg(shape=("*", "*"), doc="bytes"), "width": ScalarArg(int, doc="width")},
        rules=(Relation(name="wide", require="tensor.shape[1] >= width", message="{name} narrower than {width}",
                        why="strips fit", fix="widen"),)), max_len=2)] = Field(description="read")
    k: Annotated[int, ScalarArg(int)] = Field(description="an int")


check = RepeatToy.repeat_checker()
whole: Callable[..., Any] = check.__globals__["_check"]


def aligned(n: int) -> torch.Tensor:
    """``n`` int64 zeros starting on a 16-byte boundary (a fresh allocation is; asserted)."""
    t = torch.zeros(n + 2, dtype=torch.int64)
    t = t[(t.data_ptr() % 16) // 8:][:n]
    assert t.data_ptr() % 16 == 0
    return t


def call(**over: Any) -> dict[str, Any]:
    kw: dict[str, Any] = {"x": aligned(3), "y": None,
                          "out": Out(torch.zeros(2, 4, dtype=torch.int64), torch.zeros(1, dtype=torch.int32)),
                          "srcs": (Src(torch.zeros(2, 16, dtype=torch.uint8), 16),), "k": 0}
    kw.update(over)
    return kw


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    cache = check.__globals__["_fast_cache"]
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def full_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls that ran the whole checker."""
    runs: list[int] = []

    def counted(**kw: Any) -> Any:
        runs.append(1)
        return whole(**kw)

    monkeypatch.setitem(check.__globals__, "_check", counted)
    return runs


def same_error(kw: dict[str, Any]) -> ContractError:
    """The repeat path's error for ``kw``, asserted equal to the whole checker's (code, message, details)."""
    with pytest.raises(ContractError) as fast:
        check(**kw)
    with pytest.raises(ContractError) as full:
        whole(**kw)
    assert (fast.value.code, str(fast.value), fast.value.details) == (full.value.code, str(full.value),
                                                                       full.value.details)
    return fast.value


def test_a_repeat_call_runs_only_the_address_checks(full_runs: list[int]) -> None:
    kw = call()
    for _ in range(3):
        assert check(**kw) == torch.device("cpu")
    assert len(full_runs) == 1
    check(**call(k=5))  # a new scalar value: a new key, checked whole once
    check(**call(k=5))  # new tensors, same metadata: the repeat path (their addresses are checked)
    assert len(full_runs) == 2
    assert len(check.__globals__["_fast_cache"]) == 2


def test_new_tensors_with_the_same_metadata_take_the_repeat_path(full_runs: list[int]) -> None:
    check(**call())
    check(**call())
    assert len(full_runs) == 1


@pytest.mark.parametrize("change", [
    pytest.param(lambda kw: kw["out"].count.resize_(2), id="resized"),
    pytest.param(lambda kw: kw["x"].resize_(3, 1), id="rank"),
    pytest.param(lambda kw: kw["out"].rows.t_(), id="transposed in place"),
    pytest.param(lambda kw: kw["out"].rows.as_strided_((2, 4), (1, 2)), id="restrided"),
    pytest.param(lambda kw: setattr(kw["x"], "data", torch.zeros(3, dtype=torch.int32)), id="dtype swapped"),
    pytest.param(lambda kw: kw["srcs"][0].tensor.unsqueeze_(0), id="source rank"),
    pytest.param(lambda kw: kw["out"].count.set_(torch.zeros(2, dtype=torch.int32)), id="count storage"),
    pytest.param(lambda kw: kw["out"].count.set_(kw["out"].rows.untyped_storage(), 4, (1,)), id="aliased by set_"),
    pytest.param(lambda kw: kw["x"].set_(kw["x"].untyped_storage(), 1, (3,)), id="misaligned by set_"),
])
def test_in_place_changes_after_a_pass_fail_as_the_whole_checker_fails(change: Callable[[dict[str, Any]], Any]
                                                                       ) -> None:
    kw = call()
    check(**kw)
    change(kw)
    same_error(kw)


@pytest.mark.parametrize(("over", "kind"), [
    ({"k": True}, "bool_as_int"),
    ({"k": 9}, "relation"),
    ({"k": 2**63}, "int64"),
    ({"y": torch.zeros(4, dtype=torch.int64)}, "size"),
    ({"srcs": (Src(torch.zeros(2, 16, dtype=torch.uint8), 17),)}, "relation"),
    ({"srcs": (Src(torch.zeros(2, 16, dtype=torch.uint8), True),)}, "bool_as_int"),
    ({"srcs": (Src(torch.zeros(2, 16, dtype=torch.uint8).view(torch.int8), 16),) * 3}, "max_len"),
    ({"srcs": (object(),)}, "type"),
    ({"x": [1, 2, 3]}, "type"),
    ({"x": torch.zeros(3, dtype=torch.int64, device="meta")}, "device"),
])
def test_other_values_after_a_pass_fail_as_the_whole_checker_fails(over: dict[str, Any], kind: str) -> None:
    check(**call())
    check(**call())
    assert same_error(call(**over)).check.kind == kind


def test_new_addresses_rerun_the_alias_check() -> None:
    rows = torch.zeros(2, 4, dtype=torch.int64)
    check(**call(out=Out(rows, torch.zeros(1, dtype=torch.int32))))
    err = same_error(call(x=rows.view(-1)[2:5], out=Out(rows, torch.zeros(1, dtype=torch.int32))))
    assert err.check.kind == "aliasing"
    x = aligned(3)
    check(**call(x=x, out=Out(rows, torch.zeros(1, dtype=torch.int32))))  # apart again: passes


def test_misaligned_new_address_is_caught() -> None:
    check(**call())
    base = aligned(5)
    err = same_error(call(x=base[1:4]))
    assert err.check.kind == "relation" and "misaligned by 8" in str(err)


def test_a_bool_equal_to_a_remembered_int_is_still_rejected() -> None:
    check(**call(k=1))
    check(**call(k=1))
    assert same_error(call(k=True)).check.kind == "bool_as_int"  # True == 1: the key keeps the types apart


def test_address_failures_are_found_on_the_repeat_path(full_runs: list[int]) -> None:
    x = aligned(3)
    check(**call(x=x))
    x.set_(x.untyped_storage(), x.storage_offset() + 1, (3,), (1,))  # same metadata, address moved by 8 bytes
    with pytest.raises(ContractError, match="misaligned by 8"):
        check(**call(x=x))
    assert len(full_runs) == 1  # the second call never ran the whole checker


# -- the memo a launcher keeps with a remembered call ----------------------------------------------------------
memo_check = RepeatToy.memo_checker()


def test_the_memo_is_kept_while_a_call_repeats_exactly() -> None:
    assert memo_check is not None
    kw = call()
    dev, memo = memo_check(**kw)
    assert dev == torch.device("cpu") and memo == {}
    memo["packed"] = 1
    for _ in range(2):
        assert memo_check(**kw) == (dev, {"packed": 1})
        assert memo_check(**kw)[1] is memo


@pytest.mark.parametrize("change", [
    pytest.param(lambda kw: kw["out"].count.set_(torch.zeros(1, dtype=torch.int32)), id="storage swapped"),
    pytest.param(lambda kw: kw.update(y=None, x=aligned(3)), id="new tensor"),
])
def test_new_addresses_void_the_memo(change: Callable[[dict[str, Any]], Any]) -> None:
    assert memo_check is not None
    kw = call()
    memo = memo_check(**kw)[1]
    assert memo is not None
    memo["packed"] = 1
    change(kw)
    fresh = memo_check(**kw)[1]
    assert fresh == {} and fresh is not memo
    assert memo_check(**kw)[1] is fresh


def test_the_plain_checker_also_voids_the_memo_when_addresses_change() -> None:
    assert memo_check is not None
    kw = call()
    memo = memo_check(**kw)[1]
    assert memo is not None
    memo["packed"] = 1
    kw["x"] = aligned(3)
    check(**kw)  # the repeat path records the new addresses
    assert memo_check(**kw)[1] == {}


def test_a_call_not_remembered_has_no_memo() -> None:
    assert memo_check is not None

    class Sub(torch.Tensor):
        pass

    x = aligned(3).as_subclass(Sub)
    assert memo_check(**call(x=x)) == (torch.device("cpu"), None)


def test_memo_failures_are_the_whole_checkers() -> None:
    assert memo_check is not None
    memo_check(**call())
    with pytest.raises(ContractError) as fast:
        memo_check(**call(k=9))
    with pytest.raises(ContractError) as full:
        whole(**call(k=9))
    assert fast.value.code == full.value.code

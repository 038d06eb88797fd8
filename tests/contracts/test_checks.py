"""Each kind of check raises its own ContractError with its message, on a toy contract."""

from __future__ import annotations

import pytest
import torch

from kvcanary_contracts import ContractError, ContractTypeError
from tests.contracts.toy import Plan, Src, ToyLaunch, valid

check = ToyLaunch.checker()


def fails(**over: object) -> ContractError:
    with pytest.raises(ContractError) as info:
        check(**valid(**over))
    return info.value


def test_valid_call_returns_the_key_device() -> None:
    assert check(**valid()) == torch.device("cpu")


@pytest.mark.parametrize(
    ("over", "kind", "first_line"),
    [
        ({"buf": torch.zeros(6, 64, dtype=torch.uint8)[:, ::2]}, "contiguous", "toy: buf must be contiguous"),
        ({"buf": torch.zeros(6, 32, dtype=torch.int8)}, "dtype", "toy: buf must have dtype torch.uint8, got torch.int8"),
        ({"buf": torch.zeros(6, 32, 1, dtype=torch.uint8)}, "rank", "toy: buf must be 2-D, got shape (6, 32, 1)"),
        ({"buf": [1, 2]}, "type", "toy: buf must be a torch.Tensor, got list"),
        ({"y": torch.zeros(5, dtype=torch.int64)}, "size", "toy: y length must be 4, got 5"),
        ({"plan": Plan(torch.zeros(5, dtype=torch.int64), torch.zeros(2, dtype=torch.int32))}, "size",
         "toy: plan.count length must be 1, got 2"),
        ({"plan": Plan(torch.zeros(5, dtype=torch.int64), torch.zeros(1, dtype=torch.float32))}, "dtype",
         "toy: plan.count must have dtype torch.int32 or torch.int64, got torch.float32"),
        ({"plan": Plan(torch.zeros(5, dtype=torch.int64), torch.zeros(1, dtype=torch.int32),
                       torch.zeros(5, dtype=torch.int64))}, "min_size", "toy: plan.scratch length must be >= 6, got 5"),
        ({"plan": None}, "type", "toy: plan must be a Plan, got NoneType"),
        ({"sources": (Src(torch.zeros(3, 16, dtype=torch.uint8), 16),) * 3}, "max_len", "toy: at most 2 sources, got 3"),
        ({"sources": (Src(torch.zeros(3, 16, dtype=torch.uint8), 16), 7)}, "type",
         "toy: sources[1] must be a Src, got int"),
        ({"sources": (Src(torch.zeros(3, 4, 4, dtype=torch.uint8), 16),)}, "rank",
         "toy: sources[0].tensor (viewed as uint8) must be 2-D, got 3-D"),
        ({"sources": (Src(torch.zeros(3, 8, dtype=torch.uint8), 16),)}, "relation", "toy: sources[0] narrower than 16"),
        ({"sources": (Src(torch.zeros(3, 16, dtype=torch.uint8, device="meta"), 16),)}, "device",
         "toy: sources[0].tensor must be on buf's device cpu, got meta"),
        ({"x": torch.zeros(3, dtype=torch.int64, device="meta"), "y": torch.zeros(4, dtype=torch.int64, device="meta")},
         "device", "toy: x must be on buf's device cpu, got meta"),
        ({"check": 1}, "type", "toy: check must be bool, got int"),
        ({"window": -1}, "relation", "toy: window must be >= 0, got -1"),
        ({"cap": 4}, "relation", "toy: cap=4 but plan holds 5"),
        ({"buf": torch.zeros(6, 16, dtype=torch.uint8)}, "relation", "toy: stride must hold 4 words, got 2"),
        ({"x": torch.zeros(9, dtype=torch.int64), "y": torch.zeros(10, dtype=torch.int64)}, "relation",
         "toy: bs=9 exceeds 8"),
    ],
)
def test_each_kind_raises_its_message(over: dict[str, object], kind: str, first_line: str) -> None:
    err = fails(**over)
    assert err.rule == kind
    assert str(err).splitlines()[0] == first_line
    assert err.message == first_line
    assert err.contract == "toy_launch"
    assert err.code.startswith("TOY-T")
    second = str(err).splitlines()[1]
    assert second.startswith(f"[{err.code}] toy_launch: ")


def test_dtype_error_can_be_a_type_error() -> None:
    err = fails(x=torch.zeros(3, dtype=torch.int32))
    assert isinstance(err, ContractTypeError) and isinstance(err, TypeError) and isinstance(err, ValueError)


def test_symbol_mismatch_names_the_binder() -> None:
    err = fails(lo=torch.zeros(2, dtype=torch.int64), hi=torch.zeros(3, dtype=torch.int64))
    assert err.message == "toy: hi length must be 2, got 3"
    assert "(n=2 was bound by lo.shape[0])" in str(err)
    assert err.details["actual"] == 3 and err.details["expected"] == 2


def test_optional_binder_lets_the_next_tensor_bind() -> None:
    assert check(**valid(lo=None, hi=None)) is not None
    check(**valid(lo=torch.zeros(7, dtype=torch.int64), hi=torch.zeros(7, dtype=torch.int64)))


def test_presence_rules() -> None:
    assert fails(lo=torch.zeros(2, dtype=torch.int64)).rule == "all_or_none"
    assert "missing: hi" in fails(lo=torch.zeros(2, dtype=torch.int64)).message
    assert fails(check=True).message == "toy: expected is required when check=True"
    err = fails(expected=torch.zeros(3, dtype=torch.int64))
    assert err.rule == "forbidden_unless"
    assert err.message == "toy: expected must be None when check=False; given: expected"
    assert fails(window=2).message == "toy: lut required when window > 0"
    check(**valid(check=True, expected=torch.zeros(3, dtype=torch.int64)))
    check(**valid(window=2, lut=torch.zeros(3, dtype=torch.int64)))


def test_arguments_and_details_are_structured() -> None:
    err = fails(cap=4)
    assert err.arguments == ("cap", "plan_cap")
    assert err.details == {"cap": 4, "plan_cap": 5}
    d = err.to_dict()
    assert d["rule"] == "relation" and d["slug"] == "cap_matches"


def test_phase_order_type_before_contiguity_before_dtype() -> None:
    bad = torch.zeros(6, 64, dtype=torch.int8)[:, ::2]
    assert fails(buf=bad).rule == "contiguous"
    assert fails(buf=bad, plan=None).rule == "type"


def test_generated_checker_reads_no_values() -> None:
    """The checker source touches metadata only: no item/tolist/bool-of-tensor, no host copies."""
    src = ToyLaunch.compiled().source
    for forbidden in (".item(", ".tolist(", ".cpu(", ".numpy(", "bool(", ".any(", ".all("):
        assert forbidden not in src


def test_checks_on_meta_tensors_never_need_data() -> None:
    meta = valid(
        buf=torch.zeros(6, 32, dtype=torch.uint8, device="meta"),
        plan=Plan(torch.zeros(5, dtype=torch.int64, device="meta"), torch.zeros(1, dtype=torch.int32, device="meta")),
        sources=(Src(torch.zeros(3, 16, dtype=torch.uint8, device="meta"), 16),),
        x=torch.zeros(3, dtype=torch.int64, device="meta"), y=torch.zeros(4, dtype=torch.int64, device="meta"),
    )
    assert check(**meta) == torch.device("meta")


def test_pydantic_model_runs_the_same_contract() -> None:
    from pydantic import ValidationError

    ToyLaunch(**valid())
    with pytest.raises(ValidationError) as info:
        ToyLaunch(**valid(cap=9))
    assert "toy: cap=9 but plan holds 5" in str(info.value)


def test_json_schema_describes_tensors() -> None:
    schema = ToyLaunch.model_json_schema()
    buf = schema["properties"]["buf"]
    assert buf["x-kind"] == "tensor" and buf["x-dtype"] == ["torch.uint8"] and buf["x-shape"] == ["slots", "stride"]
    assert schema["properties"]["plan"]["properties"]["scratch"]["x-shape"] == [">= plan_cap + 1"]
    assert schema["properties"]["sources"]["maxItems"] == 2

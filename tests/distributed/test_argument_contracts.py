"""The distributed package's arguments validate through contracts (KVC-T): the wire's backend and device, a
transferred run's chain start, and every run of slots or tokens. Each rule fires with its code and names the
argument; good arguments pass; the verifier's capacity is its plan's verify capacity (one rule, KVC-A)."""

from __future__ import annotations

import re
from collections import deque

import pytest
import torch

from kvcanary.distributed import TransferVerifier, Wire, transfer_entries
from kvcanary.distributed.group import init_loopback_group
from kvcanary.distributed.slots import entries, slot_index
from kvcanary.distributed.verify import TransferStart
from kvcanary_contracts import ContractError, ContractTypeError
from tests.manager.world import make_world

CPU = torch.device("cpu")


def _refused(info: pytest.ExceptionInfo[BaseException], contract: str, slug: str, letter: str = "T") -> ContractError:
    err = info.value
    assert isinstance(err, ContractError), type(err)
    assert (err.contract, err.check.slug) == (contract, slug)
    assert re.fullmatch(rf"KVC-{letter}\d{{3}}", err.code), err.code
    assert f"[{err.code}] {contract}" in str(err).splitlines()[1]
    return err


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0]


# -- the wire ------------------------------------------------------------------------------------------------------
def test_the_wire_and_the_group_share_the_backend_rule_and_its_code() -> None:
    assert Wire(backend="nccl", device=CPU).wire_device == CPU
    with pytest.raises(ValueError) as wire:
        Wire(backend="mpi", device=CPU)
    with pytest.raises(ValueError) as group:
        init_loopback_group(0, 1, 1, backend="mpi")
    a, b = _refused(wire, "Wire", "backend_known"), _refused(group, "Wire", "backend_known")
    assert a.code == b.code and _first_line(a) == _first_line(b) == "kv-canary: backend must be 'gloo' or 'nccl', "\
                                                                      "got 'mpi'"


def test_the_wire_wants_a_device_object() -> None:
    with pytest.raises(TypeError) as info:
        Wire(backend="gloo", device="cpu")  # type: ignore[arg-type]
    err = _refused(info, "Wire", "device:type")
    assert isinstance(err, ContractTypeError) and _first_line(err) == "kv-canary: device must be a torch.device, got str"


# -- the chain start -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("first_position", "prev_slot", "slug", "text"), [
    (-1, -1, "first_position_non_negative", "kv-canary: first_position must be >= 0, got -1"),
    (0, 7, "head_has_no_predecessor", "kv-canary: prev_slot must be -1 when first_position is 0 (a chain head)"),
    (3, -1, "suffix_names_predecessor", "kv-canary: prev_slot must name the slot of position 2, got -1"),
    (3, 0, "suffix_names_predecessor", "kv-canary: prev_slot must name the slot of position 2, got 0"),
])
def test_each_chain_start_rule_fires_with_its_code(first_position: int, prev_slot: int, slug: str, text: str) -> None:
    with pytest.raises(ValueError) as info:
        TransferStart(first_position=first_position, prev_slot=prev_slot)
    assert _first_line(_refused(info, "TransferStart", slug)) == text
    with pytest.raises(ContractError) as again:  # the same rule, whichever entry point is called
        transfer_entries([3, 4], first_position, prev_slot)
    assert again.value.code == info.value.code  # type: ignore[attr-defined]


def test_good_chain_starts_pass() -> None:
    assert TransferStart() == TransferStart(first_position=0, prev_slot=-1)
    assert transfer_entries([3, 4], 2, prev_slot=9) == ([3, 4], [2, 3], [9, 3])
    with pytest.raises(TypeError, match=r"prev_slot must be int, got float") as info:
        TransferStart(first_position=1, prev_slot=2.0)  # type: ignore[arg-type]
    _refused(info, "TransferStart", "prev_slot:type")


# -- runs of slots and tokens ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("values", "name", "num_slots", "slug", "text"), [
    ("12", "slots", 8, "values:type", "kv-canary: slots or tokens must be a sequence of integers or a 1-D "
                                      "integer tensor, got str"),
    ({1, 2}, "tokens", None, "values:type", "kv-canary: slots or tokens must be a sequence of integers or a 1-D "
                                            "integer tensor, got set"),
    (torch.tensor([[1, 2]]), "slots", None, "tensor_is_1d_integer",
     "kv-canary: slots must be a 1-D integer tensor, got torch.int64 of shape (1, 2)"),
    (torch.tensor([True]), "tokens", None, "tensor_is_1d_integer",
     "kv-canary: tokens must be a 1-D integer tensor, got torch.bool of shape (1,)"),
    ([3, True], "slots", 8, "items_are_integers", "kv-canary: slots[1] must be an integer, got bool"),
    ((3, 4.0), "tokens", None, "items_are_integers", "kv-canary: tokens[1] must be an integer, got float"),
    ([0, 3], "slots", 8, "slots_in_range",
     "kv-canary: slots must hold slots in [1, 8) (slot 0 is the padding slot), got values in [0, 3]"),
    (torch.tensor([5, 8], dtype=torch.int32), "slots", 8, "slots_in_range",
     "kv-canary: slots must hold slots in [1, 8) (slot 0 is the padding slot), got values in [5, 8]"),
    ([5, 2**70], "tokens", None, "items_fit_int64", f"kv-canary: tokens[1] must fit in int64 ([-2**63, 2**63)), "
                                                    f"got {2**70}"),
    ([-(2**63) - 1], "slots", 8, "items_fit_int64", f"kv-canary: slots[0] must fit in int64 ([-2**63, 2**63)), "
                                                    f"got {-(2**63) - 1}"),
    ([3, 4, 3], "slots", 8, "slots_distinct", "kv-canary: slots must hold distinct slots: slots[2] repeats slot 3"),
    (torch.tensor([6, 2, 2], dtype=torch.int32), "slots", 8, "slots_distinct",
     "kv-canary: slots must hold distinct slots: slots[2] repeats slot 2"),
])
def test_each_run_rule_fires_with_its_code(values: object, name: str, num_slots: int | None, slug: str,
                                           text: str) -> None:
    with pytest.raises(ValueError) as info:
        entries(values, name, CPU, num_slots)  # type: ignore[arg-type]
    assert _first_line(_refused(info, "entries", slug)) == text


def test_good_runs_become_int64_on_the_device() -> None:
    for run in ([1, 7], (1, 7), deque([1, 7]), range(1, 8, 6), torch.tensor([1, 7], dtype=torch.int32)):
        out = slot_index(run, "slots", 8, CPU)
        assert out.dtype == torch.int64 and out.tolist() == [1, 7]
    assert entries([], "tokens", CPU).tolist() == []
    assert entries([0, -5], "tokens", CPU).tolist() == [0, -5]  # tokens have no slot range
    assert entries([4, 4, 2**63 - 1, -(2**63)], "tokens", CPU).tolist() == [4, 4, 2**63 - 1, -(2**63)]  # nor distinct


def test_the_verifier_capacity_is_its_plans_verify_capacity() -> None:
    w = make_world()
    assert TransferVerifier(w.manager, 1).plan.verify_capacity == 1
    with pytest.raises(ValueError, match=r"verify_capacity must be positive, got 0") as info:
        TransferVerifier(w.manager, 0)
    _refused(info, "VerifyPlan.allocate", "verify_capacity_positive", letter="A")

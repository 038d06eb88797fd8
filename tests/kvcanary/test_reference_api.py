"""The reference's API, shape for shape: what each public method returns, which arguments are keyword-only,
the defaults, and which dataclasses are frozen, slotted, keyword-only, compared and printed field by field.

An engine written against SGLang's kv-canary switches by changing one import, so a method that returns
``None`` where the reference returns the object (``VerifyPlan.allocate(...).zero_for_testing_()``), or an
argument that turns positional, breaks it; this pins every such detail of the shared surface.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
from collections.abc import Callable
from typing import Any

import pytest
import torch

import kvcanary as kc
from kvcanary.testing import calls

KW = inspect.Parameter.KEYWORD_ONLY


def _params(fn: Callable[..., Any]) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)


def _flags(cls: type) -> dict[str, bool]:
    p = cls.__dataclass_params__  # type: ignore[attr-defined]
    return {"frozen": p.frozen, "eq": p.eq, "kw_only": all(f.kw_only for f in dataclasses.fields(cls)),
            "slots": "__slots__" in cls.__dict__}


@pytest.mark.parametrize(("cls", "fields", "flags"), [
    (kc.RealKvSource, ["tensor", "page_size", "num_bytes_per_token", "read_bytes"],
     {"frozen": True, "eq": True, "kw_only": True, "slots": True}),
    (kc.VerifyOrWriteContext, ["canary_buf", "kernel_kind", "violation_ring", "violation_write_index",
                               "slot_run_counter", "kernel_run_counter", "real_kv_sources", "real_kv_hash_mode",
                               "enable_chain_position_assert"], {"frozen": True, "eq": True, "kw_only": True}),
    (kc.VerifyPlan, ["verify_slot_indices", "verify_expected_tokens", "verify_expected_positions",
                     "verify_prev_slot_indices", "verify_num_valid", "enable"], {"eq": True, "kw_only": True}),
    (kc.WritePlan, ["write_offsets", "write_seed_slot_indices", "write_num_valid_reqs"], {"eq": True, "kw_only": True}),
], ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_dataclass_fields_and_flags(cls: type, fields: list[str], flags: dict[str, bool]) -> None:
    """The reference's fields, in its order (kvcanary's additions only after them, with defaults)."""
    names = [f.name for f in dataclasses.fields(cls)]
    assert names[: len(fields)] == fields
    extra = dataclasses.fields(cls)[len(fields):]
    assert all(f.default is not dataclasses.MISSING for f in extra), [f.name for f in extra]
    got = _flags(cls)
    assert {k: got[k] for k in flags} == flags


def test_frozen_dataclasses_refuse_assignment_and_print_their_fields() -> None:
    src = kc.RealKvSource(tensor=torch.zeros(4, 16, dtype=torch.uint8), page_size=1, num_bytes_per_token=16,
                          read_bytes=16)
    with pytest.raises(dataclasses.FrozenInstanceError):
        src.page_size = 2  # type: ignore[misc]
    assert repr(src).startswith("RealKvSource(tensor=tensor(") and "page_size=1, num_bytes_per_token=16" in repr(src)
    assert src == dataclasses.replace(src) and src != dataclasses.replace(src, read_bytes=16, page_size=2)
    with pytest.raises(TypeError):
        kc.RealKvSource(src.tensor, 1, 16, 16)  # type: ignore[call-arg]  # keyword-only, as the reference's
    ctx = calls.write()["context"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.kernel_kind = kc.CanaryLaunchTag.HEAD_K_FULL
    assert repr(ctx).startswith("VerifyOrWriteContext(canary_buf=")


@pytest.mark.parametrize(("allocate", "capacity"), [(kc.VerifyPlan.allocate, "verify_capacity"),
                                                    (kc.WritePlan.allocate, "write_req_capacity"),
                                                    (kc.ViolationLog.allocate, "ring_capacity")],
                         ids=["VerifyPlan", "WritePlan", "ViolationLog"])
def test_allocate_takes_keywords_only(allocate: Callable[..., Any], capacity: str) -> None:
    params = _params(allocate)
    assert list(params) == [capacity, "device"] and all(p.kind is KW for p in params.values())
    assert all(p.default is inspect.Parameter.empty for p in params.values())
    with pytest.raises(TypeError):
        allocate(4, "cpu")
    with pytest.raises(ValueError, match="must be positive, got 0"):
        allocate(**{capacity: 0, "device": "cpu"})


def test_zero_for_testing_returns_the_plan_and_chains_after_allocate() -> None:
    vp = kc.VerifyPlan.allocate(verify_capacity=8, device="cpu").zero_for_testing_()
    assert isinstance(vp, kc.VerifyPlan)
    assert vp.zero_for_testing_() is vp
    assert vp.verify_expected_tokens.tolist() == [-1] * 8 and int(vp.enable[0]) == 0
    assert vp.verify_slot_indices.tolist() == [0] * 8 and int(vp.verify_num_valid[0]) == 0
    wp = kc.WritePlan.allocate(write_req_capacity=4, device="cpu").zero_for_testing_()
    assert isinstance(wp, kc.WritePlan) and wp.zero_for_testing_() is wp
    assert wp.write_offsets.tolist() == [0] * 5 and wp.write_seed_slot_indices.tolist() == [0] * 4


def test_allocated_plans_have_the_reference_shapes_dtypes_and_enable() -> None:
    vp = kc.VerifyPlan.allocate(verify_capacity=8, device="cpu")
    for t in (vp.verify_slot_indices, vp.verify_expected_tokens, vp.verify_expected_positions,
              vp.verify_prev_slot_indices):
        assert t.shape == (8,) and t.dtype == torch.int64
    assert vp.verify_num_valid.shape == vp.enable.shape == (1,)
    assert vp.verify_num_valid.dtype == vp.enable.dtype == torch.int32 and int(vp.enable[0]) == 1
    wp = kc.WritePlan.allocate(write_req_capacity=4, device="cpu")
    assert wp.write_offsets.shape == (5,) and wp.write_seed_slot_indices.shape == (4,)
    assert wp.write_offsets.dtype == wp.write_seed_slot_indices.dtype == torch.int64
    assert wp.write_num_valid_reqs.shape == (1,) and wp.write_num_valid_reqs.dtype == torch.int32
    log = kc.ViolationLog.allocate(ring_capacity=16, device="cpu")
    assert log.violation_ring.shape == (16, 8) and log.violation_ring.dtype == torch.int64
    assert log.violation_write_index.shape == (1,) and log.violation_write_index.dtype == torch.int32


def test_allocation_bytes_are_static_and_count_as_the_reference_does() -> None:
    assert inspect.isfunction(inspect.getattr_static(kc.VerifyPlan, "allocation_bytes").__func__)
    assert kc.VerifyPlan.allocation_bytes(100) == 4 * 100 * 8 + 2 * 4
    assert kc.WritePlan.allocation_bytes(100) == (2 * 100 + 1) * 8 + 4
    assert kc.VerifyPlan.allocate(verify_capacity=3, device="cpu").allocation_bytes(3) == 4 * 3 * 8 + 8


LAUNCHERS: dict[str, list[str]] = {
    "launch_canary_plan_kernels": [
        "verify_plan_out", "write_plan_out", "req_pool_indices", "prefix_lens", "extend_seq_lens", "req_to_token",
        "swa_window_size", "full_to_swa_index_mapping", "verify_capacity", "req_to_verify_expected_tokens",
        "req_to_verify_expected_tokens_valid_lens", "kv_token_id_vs_position_offset"],
    "launch_canary_verify_kernel": ["context", "plan", "check_verify_expected_token"],
    "launch_canary_write_kernel": ["context", "plan", "input_ids", "positions", "out_cache_loc",
                                   "enable_write_input_assert", "expected_input_tokens", "expected_input_positions"],
    "launch_scatter_req_token_ids_kernel": ["flat_in", "offsets", "req_pool_indices", "pool_out"],
}


EXTENSION_PARAMS: dict[str, list[str]] = {
    "launch_canary_plan_kernels": ["extensions"], "launch_canary_verify_kernel": ["extensions"],
    "launch_canary_write_kernel": ["req_pool_indices", "req_to_token", "full_to_swa_index_mapping", "slot_owner",
                                   "extensions"],
}
"""kvcanary's opt-in extension parameters (after the reference's, all defaulting to None)."""


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_launchers_take_the_reference_keywords_only_and_return_none(name: str) -> None:
    """Every reference argument is keyword-only and required (no defaults); kvcanary adds only ``backend=None``
    and the opt-in extension parameters, which default to None (the reference's behaviour)."""
    params = _params(getattr(kc, name))
    ext = EXTENSION_PARAMS.get(name, [])
    assert list(params) == [*LAUNCHERS[name], *ext, "backend"]
    assert all(p.kind is KW for p in params.values())
    assert [n for n, p in params.items() if p.default is not inspect.Parameter.empty] == [*ext, "backend"]
    assert all(params[n].default is None for n in ext)
    assert params["backend"].default is None
    builders: dict[str, Callable[[], dict[str, Any]]] = {
        "launch_canary_plan_kernels": calls.plan, "launch_canary_verify_kernel": calls.verify,
        "launch_canary_write_kernel": calls.write, "launch_scatter_req_token_ids_kernel": calls.scatter}
    with kc.use_backend("torch_ref"):
        assert getattr(kc, name)(**builders[name]()) is None


@pytest.mark.parametrize(("cls", "base", "members"), [
    (kc.FailReason, enum.IntFlag, {"VERIFY_CHAIN_HASH_MISMATCH": 1, "VERIFY_POSITION_MISMATCH": 2,
                                   "VERIFY_REAL_KV_HASH_MISMATCH": 4, "WRITE_TOKEN_MISMATCH": 8,
                                   "WRITE_POSITION_MISMATCH": 16, "VERIFY_TOKEN_MISMATCH": 32}),
    (kc.RealKvHashMode, enum.IntEnum, {"NONE": 0, "PARTIAL": 1, "ALL": 2}),
    (kc.PoolKind, enum.IntEnum, {"FULL": 0, "SWA": 1}),
    (kc.CanaryMode, str, {"NONE": "none", "LOG": "log", "RAISE": "raise"}),
    (kc.CanaryLaunchTag, enum.IntEnum, {f"{w}_{h}_{g}": i for i, (g, w, h) in enumerate(
        (g, w, h) for g in ("FULL", "SWA") for w in ("HEAD", "TAIL", "SWEEP") for h in ("K", "V"))}),
], ids=lambda v: v.__name__ if isinstance(v, type) else "")
def test_enums_have_the_reference_members(cls: type[enum.Enum], base: type, members: dict[str, object]) -> None:
    """The reference's members with its values; an addition of kvcanary's takes a value of its own."""
    assert issubclass(cls, base)
    got = {m.name: m.value for m in cls}
    assert {k: v for k, v in got.items() if k in members} == members
    assert not {v for k, v in got.items() if k not in members} & set(members.values())


def test_hash_functions_are_positional_and_pinned() -> None:
    assert list(_params(kc.splitmix64)) == ["x"] and list(_params(kc.splitmix64_mix3)) == ["a", "b", "c"]
    assert kc.splitmix64(0x0000000000000001) == 0x5692161D100B05E5
    assert kc.splitmix64(kc.CANARY_CHAIN_ANCHOR) == 0xDE7FAE23A9A1B716
    assert kc.CANARY_SLOT_BYTES == 32 and kc.VIOLATION_FIELDS == 8 and kc.MAX_REAL_KV_SOURCES == 4

"""Configuration and capacity validation: bad input names the argument and the rule."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
import torch

from kvcanary.consts import CanaryMode, PoolKind, RealKvHashMode
from kvcanary.extensions import Extensions
from kvcanary.manager import CanaryCapacities, CanaryConfig, KvPoolSpec, PoolGroupSpec
from kvcanary_contracts import ContractError


def test_from_strings_is_case_insensitive_and_rejects_unknown_values() -> None:
    cfg = CanaryConfig.from_strings(mode="RAISE", real_data=" Partial ", sweep_interval=5)
    assert cfg.mode is CanaryMode.RAISE and cfg.real_kv_mode is RealKvHashMode.PARTIAL and cfg.sweep_interval == 5
    with pytest.raises(ValueError, match=r"kv_canary must be one of none/log/raise, got 'loud'"):
        CanaryConfig.from_strings(mode="loud")
    with pytest.raises(ValueError, match=r"kv_canary_real_data must be one of none/partial/all, got 'some'"):
        CanaryConfig.from_strings(real_data="some")


@pytest.mark.parametrize(("field", "value", "rule"), [
    ("ring_capacity", 0, "must be a positive int"),
    ("sweep_interval", -1, "must be a non-negative int"),
    ("num_forward_slots", 0, "must be a positive int"),
    ("health_every", True, "must be a positive int"),
])
def test_config_fields(field: str, value: object, rule: str) -> None:
    with pytest.raises(ValueError, match=rf"CanaryConfig.{field} {rule}") as info:
        CanaryConfig(**{field: value})  # type: ignore[arg-type]
    assert isinstance(info.value, ContractError) and re.fullmatch(r"KVC-C\d{3}", info.value.code)
    assert info.value.arguments[0] in (field, f"CanaryConfig.{field}")


@pytest.mark.parametrize(("value", "code", "text"), [
    (0, "KVC-C115", "CanaryConfig.guard_history must be a positive int or None, got 0"),
    (-5, "KVC-C115", "CanaryConfig.guard_history must be a positive int or None, got -5"),
    (True, "KVC-C113", "CanaryConfig.guard_history must be a positive int or None, got True"),
    ("64", "KVC-C112", "CanaryConfig.guard_history must be int or None, got str"),
])
def test_guard_history_is_a_positive_int_or_none(value: object, code: str, text: str) -> None:
    """The isolate policy's records' size: a positive count, or None for every entry; anything else names the
    setting and the rule."""
    with pytest.raises(ValueError) as info:
        CanaryConfig(guard_history=value)  # type: ignore[arg-type]
    assert isinstance(info.value, ContractError) and info.value.code == code
    assert str(info.value).splitlines()[0] == f"kv-canary: {text}"
    assert CanaryConfig().guard_history == 1024 and CanaryConfig(guard_history=None).guard_history is None
    assert CanaryConfig(guard_history=1).guard_history == 1


def test_config_enum_types() -> None:
    with pytest.raises(TypeError, match=r"CanaryConfig.mode must be a CanaryMode") as info:
        CanaryConfig(mode="log")  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError), "a ContractTypeError: code catching either keeps working"


def test_a_config_field_without_a_setting_is_refused() -> None:
    """The contract checks every field of the dataclass: one added without its setting fails at once."""

    @dataclass(frozen=True, kw_only=True)
    class Extended(CanaryConfig):
        quarantine_after_steps: int = 0

    with pytest.raises(TypeError, match="quarantine_after_steps"):
        Extended()


def test_config_takes_the_owner_check_the_manager_feeds() -> None:
    ext = CanaryConfig(extensions=Extensions(write_slot_owner_mismatch=True)).extensions
    assert ext is not None and ext.write_slot_owner_mismatch


def test_capacities() -> None:
    with pytest.raises(ValueError, match=r"kv-canary: verify_capacity must be positive, got 0"):
        CanaryCapacities(verify_capacity=0, write_req_capacity=1, write_token_capacity=1, sweep_capacity=1)
    caps = CanaryCapacities.from_engine(pool_slot_count=100, max_batch_size=8, req_rows=5, max_tokens_per_forward=64,
                                        max_context_len=32, spec_num_draft_tokens=3)
    assert caps.verify_capacity == 300 and caps.write_req_capacity == 8 and caps.sweep_capacity == 100
    assert caps.write_token_capacity == max(8 * 4, 64) and caps.expected_token_capacity == 8 * 32


def test_pool_spec_rules() -> None:
    k = torch.zeros(16, 2, 8)
    r2t = torch.zeros(4, 8, dtype=torch.int32)
    full = PoolGroupSpec(kind=PoolKind.FULL, k_layer0=k, v_layer0=k.clone())
    with pytest.raises(ValueError, match=r"full_to_swa_index_mapping is required for an SWA group"):
        PoolGroupSpec(kind=PoolKind.SWA, k_layer0=k, swa_window_size=4)
    with pytest.raises(ValueError, match=r"swa_window_size must be positive for an SWA group"):
        PoolGroupSpec(kind=PoolKind.SWA, k_layer0=k, full_to_swa_index_mapping=torch.zeros(16, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"v_layer0 must have as many slots as k_layer0 \(16\), got 3"):
        PoolGroupSpec(kind=PoolKind.FULL, k_layer0=k, v_layer0=torch.zeros(3, 2, 8))
    with pytest.raises(ValueError, match=r"groups must be \(FULL,\) or \(FULL, SWA\)"):
        KvPoolSpec(groups=(), req_to_token=r2t)
    with pytest.raises(ValueError, match=r"req_to_token must be a contiguous 2-D int32 tensor"):
        KvPoolSpec(groups=(full,), req_to_token=r2t.long())
    with pytest.raises(ValueError, match=r"kv_token_id_vs_position_offset must be 0 \(target\) or 1 \(draft\)"):
        KvPoolSpec(groups=(full,), req_to_token=r2t, kv_token_id_vs_position_offset=2)
    swa = PoolGroupSpec(kind=PoolKind.SWA, k_layer0=k, swa_window_size=4,
                        full_to_swa_index_mapping=torch.zeros(5, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"must cover every full slot \(16\), got length 5"):
        KvPoolSpec(groups=(full, swa), req_to_token=r2t)


def test_real_kv_rows_must_be_16_byte_multiples() -> None:
    from kvcanary.manager import CanaryManager

    k = torch.zeros(16, 3)  # 12-byte rows
    pool = KvPoolSpec(groups=(PoolGroupSpec(kind=PoolKind.FULL, k_layer0=k),), req_to_token=torch.zeros(
        4, 8, dtype=torch.int32))
    caps = CanaryCapacities(verify_capacity=8, write_req_capacity=4, write_token_capacity=8, sweep_capacity=16)
    with pytest.raises(ValueError, match=r"num_bytes_per_token must be a positive multiple of 16, got 12"):
        CanaryManager.attach(pool=pool, capacities=caps, config=CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL))
    mgr = CanaryManager.attach(pool=pool, capacities=caps, config=CanaryConfig(real_kv_mode=RealKvHashMode.NONE))
    assert mgr.groups[0].real_kv_sources_k == ()


def test_input_assert_without_expected_tensors_is_the_write_rule_before_any_launch() -> None:
    """With ``enable_write_input_assert`` a batch without the oracle's tensors is refused while it is staged,
    with the write launch's own rule (KVC-W083), before the plan or any verify of the forward runs."""
    from kvcanary.errors import ContractError
    from tests.manager.world import Req, make_world

    w = make_world(config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL, enable_write_input_assert=True))
    counters = w.manager.state.kernel_run_counters.clone()
    with pytest.raises(ContractError) as info:
        w.forward([(Req(row=1, slots=[3, 4], tokens=[7, 8]), 0, 2)])
    assert info.value.code == "KVC-W083" and "expected input tensors are required" in str(info.value)
    assert torch.equal(w.manager.state.kernel_run_counters, counters), "a launch ran before the refusal"

"""The per-forward inputs, the server strings and the evidence settings validate through their contracts:
each refusal is a ContractError with its rule's code, and SGLang's pinned texts come out word for word."""

from __future__ import annotations

import re

import pytest
import torch

from kvcanary.constructors.config import CanaryConfigContract
from kvcanary.constructors.real_kv_source import RealKvSourceContract
from kvcanary.consts import CanaryLaunchTag, RealKvHashMode
from kvcanary.evidence import BundleLimits, RequestView
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.manager import CanaryBatch, CanaryConfig, ExpectedTokens, SweepEntries
from kvcanary.manager.buffers import resolve_read_bytes
from kvcanary.manager.rotation import LayerRotation
from kvcanary_contracts import ContractError, ContractRuntimeError, ContractTypeError
from tests.manager.world import t64


def _refused(info: pytest.ExceptionInfo[BaseException], letter: str) -> ContractError:
    err = info.value
    assert isinstance(err, ContractError), type(err)
    assert re.fullmatch(rf"KVC-{letter}\d{{3}}", err.code), err.code
    assert f"[{err.code}]" in str(err).splitlines()[1]  # the pointer line names the code
    return err


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0]


def _batch(**over: object) -> CanaryBatch:
    fields: dict[str, object] = {"req_pool_indices": t64([1, 2]), "prefix_lens": t64([0, 0]),
                                 "extend_lens": t64([1, 1]), "input_ids": t64([5, 6]), "positions": t64([0, 0]),
                                 "out_cache_loc": t64([3, 4])}
    return CanaryBatch(**{**fields, **over})  # type: ignore[arg-type]


# -- the server strings ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "text"), [
    ({"mode": "loud"}, "kv-canary: kv_canary must be one of none/log/raise, got 'loud'"),
    ({"mode": " Loud "}, "kv-canary: kv_canary must be one of none/log/raise, got ' Loud '"),
    ({"real_data": "some"}, "kv-canary: kv_canary_real_data must be one of none/partial/all, got 'some'"),
])
def test_from_strings_gives_sglangs_text_and_a_code(kwargs: dict[str, str], text: str) -> None:
    with pytest.raises(ValueError) as info:
        CanaryConfig.from_strings(**kwargs)
    err = _refused(info, "F")
    assert _first_line(err) == text


def test_from_strings_accepts_every_value_of_the_enums_in_any_case() -> None:
    for mode in ("none", "LOG", " Raise "):
        for real in ("NONE", "partial", " All "):
            cfg = CanaryConfig.from_strings(mode=mode, real_data=real)
            assert cfg.mode.value == mode.strip().lower() and cfg.real_kv_mode.name == real.strip().upper()


def test_from_strings_refuses_a_non_string_with_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"CanaryConfig.from_strings.mode must be str, got int") as info:
        CanaryConfig.from_strings(mode=1)  # type: ignore[arg-type]
    assert isinstance(_refused(info, "F"), ContractTypeError)


def test_policy_names_share_one_rule_and_name_the_setting() -> None:
    with pytest.raises(ValueError) as info:
        ViolationPolicy.parse("drop", name="--on-violation")
    err = _refused(info, "F")
    assert _first_line(err) == "kv-canary: --on-violation must be one of log/raise/isolate, got 'drop'"
    with pytest.raises(ValueError) as again:
        ViolationPolicy.parse("drop")
    assert _refused(again, "F").code == err.code and "on_violation must be one of" in str(again.value)
    assert ViolationPolicy.parse(ViolationPolicy.RAISE) is ViolationPolicy.RAISE
    assert ViolationPolicy.parse(" ISOLATE ") is ViolationPolicy.ISOLATE


# -- the batch ---------------------------------------------------------------------------------------------------
def test_batch_rules_run_when_it_is_built() -> None:
    with pytest.raises(TypeError, match=r"input_ids must have dtype torch.int32 or torch.int64, got torch.float32"):
        _batch(input_ids=torch.zeros(2))
    with pytest.raises(TypeError, match=r"prefix_lens must be a torch.Tensor, got list") as info:
        _batch(prefix_lens=[0, 0])
    assert isinstance(_refused(info, "B"), ContractTypeError)
    with pytest.raises(ValueError, match=r"extend_lens must be 1-D, got shape \(2, 1\)"):
        _batch(extend_lens=t64([1, 1]).view(2, 1))
    with pytest.raises(ValueError, match=r"extend_lens length must equal req_pool_indices length 2, got 3"):
        _batch(extend_lens=t64([1, 1, 1]))
    with pytest.raises(ValueError, match=r"expected_input_positions length must equal input_ids length 2, got 1"):
        _batch(expected_input_tokens=t64([5, 6]), expected_input_positions=t64([0]))
    with pytest.raises(ValueError, match=r"positions must be on req_pool_indices' device cpu, got meta") as moved:
        _batch(positions=t64([0, 0]).to("meta"))
    _refused(moved, "B")
    with pytest.raises(TypeError, match=r"expected_tokens must be an ExpectedTokens or None, got list"):
        _batch(expected_tokens=[[5], [6]])


def test_the_snapshot_keeps_sglangs_runtime_errors() -> None:
    with pytest.raises(RuntimeError) as info:
        _batch(expected_tokens=ExpectedTokens.from_lists([[5]]))
    err = _refused(info, "B")
    assert isinstance(err, ContractRuntimeError) and isinstance(err, ValueError)
    assert _first_line(err) == "kv-canary: req_all_ids_lens length 1 != batch_size 2; ForwardBatch snapshot diverged"
    with pytest.raises(RuntimeError) as info:
        ExpectedTokens(flat=t64([1, 2]), lens=t64([1, 2]))
    assert _first_line(_refused(info, "B")) == ("kv-canary: cumsum(req_all_ids_lens)=3 != req_all_ids_flat.numel()=2; "
                                                "snapshot inconsistent")
    with pytest.raises(ValueError, match=r"ExpectedTokens.lens must be >= 0 \(tokens per row\), got -1") as negative:
        ExpectedTokens(flat=t64([1]), lens=t64([-1, 2]))
    assert not isinstance(negative.value, RuntimeError)
    with pytest.raises(ValueError, match=r"ExpectedTokens.flat must be a 1-D int64 CPU tensor, got a tensor on meta"):
        ExpectedTokens(flat=t64([1]).to("meta"), lens=t64([1]))
    with pytest.raises(ValueError, match=r"ExpectedTokens.lens must be a 1-D int64 CPU tensor, got dtype torch.int32"):
        ExpectedTokens(flat=t64([1]), lens=torch.tensor([1], dtype=torch.int32))
    assert _batch(expected_tokens=ExpectedTokens.from_lists([[5, 6], []])).expected_tokens is not None
    assert ExpectedTokens.from_lists([]).lens.numel() == 0


def test_validate_checks_the_pool_device_with_its_code() -> None:
    batch = _batch()
    batch.validate(torch.device("cpu"))
    with pytest.raises(ValueError) as info:
        batch.validate(torch.device("meta"))
    err = _refused(info, "B")
    assert _first_line(err) == "kv-canary: CanaryBatch must be on the pool's device meta, got cpu"
    with pytest.raises(TypeError, match=r"device must be a device, got str"):
        batch.validate("cpu")  # type: ignore[arg-type]


# -- the sweep's entries -----------------------------------------------------------------------------------------
def test_sweep_entries_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match=r"SweepEntries.prev_slots must be 1-D int64 of length 2 \(SweepEntries.slots'\)"
                                         r", got length 1") as info:
        SweepEntries(t64([1, 2]), t64([0, 1]), t64([-1]))
    _refused(info, "B")
    with pytest.raises(ValueError, match=r"SweepEntries.slots must be 1-D int64, got dtype torch.int32"):
        SweepEntries(torch.tensor([1], dtype=torch.int32), t64([0]), t64([-1]))
    assert len(SweepEntries.from_lists([4, 5], [0, 1], [-1, 4])) == 2


# -- the evidence settings ---------------------------------------------------------------------------------------
def test_evidence_settings_validate_through_contracts() -> None:
    with pytest.raises(ValueError, match=r"BundleLimits.max_rows must be a positive int, got 0") as info:
        BundleLimits(max_rows=0)
    _refused(info, "X")
    with pytest.raises(ValueError, match=r"BundleLimits.max_bytes must be a positive int, got True"):
        BundleLimits(max_bytes=True)
    with pytest.raises(ValueError, match=r"RequestView\('r1'\): tokens, positions and slots must have one length, "
                                         r"got 2, 2, 1") as info:
        RequestView("r1", (1, 2), (0, 1), (7,))
    _refused(info, "X")
    with pytest.raises(ValueError, match=r"RequestView.block_size must be a positive int, got 0"):
        RequestView("r1", (1,), (0,), (7,), 0)
    assert RequestView("r1", (1, 2), (0, 1), (16, 17), 16).block_table == [1]


# -- no second copy of a rule --------------------------------------------------------------------------------------
def test_the_rotation_raises_the_configs_own_codes() -> None:
    codes = {c.slug: c.code for c in CanaryConfigContract.checks()}
    for per_step, mode, slug in ((5, RealKvHashMode.PARTIAL, "layer_rotation_at_most_sources"),
                                 (2, RealKvHashMode.NONE, "layer_rotation_needs_real_kv")):
        with pytest.raises(ContractError) as info:
            LayerRotation(layers=(), per_step=per_step, mode=mode, tag=CanaryLaunchTag.TAIL_K_FULL,
                          state=None, name="k")  # type: ignore[arg-type]  # refused before the state is read
        assert info.value.code == codes[slug]


def test_row_width_raises_real_kv_sources_code() -> None:
    code = next(c.code for c in RealKvSourceContract.checks() if c.slug == "num_bytes_per_token_multiple_of_16")
    with pytest.raises(ContractError, match=r"num_bytes_per_token must be a positive multiple of 16, got 12") as info:
        resolve_read_bytes(RealKvHashMode.PARTIAL, 12)
    assert info.value.code == code
    assert resolve_read_bytes(RealKvHashMode.NONE, 12) == 0
    assert resolve_read_bytes(RealKvHashMode.ALL, 48) == 48


def test_a_value_rule_fires_on_a_call_shaped_like_one_that_passed() -> None:
    """The inputs' rules read host values (lengths): a call with the same types, shapes and strides as one that
    passed must still run them (the launchers' repeat-call path never applies here)."""
    for _ in range(3):
        ExpectedTokens(flat=t64([1, 2, 3]), lens=t64([1, 2]))
    with pytest.raises(ValueError, match=r"ExpectedTokens.lens must be >= 0"):
        ExpectedTokens(flat=t64([1, 2, 3]), lens=t64([-1, 4]))
    with pytest.raises(RuntimeError, match=r"cumsum\(req_all_ids_lens\)=4 != req_all_ids_flat.numel\(\)=3"):
        ExpectedTokens(flat=t64([1, 2, 3]), lens=t64([2, 2]))


def test_the_slot_journal_validates_through_its_contract() -> None:
    """Each bound of the journal is one rule with its code (KVC-X); a bool is no count."""
    from kvcanary.guard import SlotJournal

    assert SlotJournal(block_size=16).block_size == 16
    with pytest.raises(ValueError, match=r"SlotJournal.block_size must be a positive int, got 0") as info:
        SlotJournal(block_size=0)
    codes = {_refused(info, "X").code}
    for bad in ({"per_block": 0}, {"max_blocks": -1}, {"max_finished": True}):
        with pytest.raises(ValueError, match=rf"SlotJournal.{next(iter(bad))} must be a positive int") as info:
            SlotJournal(block_size=4, **bad)
        codes.add(_refused(info, "X").code)
    assert len(codes) == 4  # one rule (and code) per setting

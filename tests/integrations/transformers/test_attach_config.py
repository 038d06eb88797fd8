"""``attach_canaries``' string settings validate through their contract (``attach_config``, KVC-F): each rule
fires with its code and the text attach_canaries has always given; good settings build the CanaryConfig.
No model is needed: the settings are checked before anything touches the engine."""

from __future__ import annotations

import re

import pytest

from kvcanary.consts import CanaryMode, RealKvHashMode
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.integrations.transformers import attach_config
from kvcanary_contracts import ContractError, ContractTypeError


def _refused(info: pytest.ExceptionInfo[BaseException], slug: str) -> ContractError:
    err = info.value
    assert isinstance(err, ContractError), type(err)
    assert err.check.slug == slug and err.contract == "attach_config", (err.contract, err.check.slug)
    assert re.fullmatch(r"KVC-F\d{3}", err.code), err.code
    assert f"[{err.code}] attach_config" in str(err).splitlines()[1]
    return err


def test_good_settings_build_the_config() -> None:
    cfg = attach_config()
    assert cfg.mode is CanaryMode.LOG and cfg.real_kv_mode is RealKvHashMode.PARTIAL and cfg.on_violation is None
    cfg = attach_config(mode=" RAISE ", real_kv="All", sweep_interval=4)
    assert cfg.mode is CanaryMode.RAISE and cfg.real_kv_mode is RealKvHashMode.ALL and cfg.sweep_interval == 4
    cfg = attach_config(on_violation=ViolationPolicy.ISOLATE)  # the policy chooses; mode stays at log
    assert cfg.mode is CanaryMode.LOG and cfg.policy is ViolationPolicy.ISOLATE
    assert attach_config(mode="raise", on_violation=ViolationPolicy.RAISE).policy is ViolationPolicy.RAISE


@pytest.mark.parametrize(("kwargs", "slug", "text"), [
    ({"real_kv": "none"}, "real_kv_fingerprints", "kv-canary: real_kv must be 'partial' or 'all', got 'none'"),
    ({"mode": "off"}, "mode_log_or_raise", "kv-canary: mode must be 'log' or 'raise', got 'off'"),
    ({"mode": "none"}, "mode_log_or_raise", "kv-canary: mode must be 'log' or 'raise', got 'none'"),
    ({"mode": "raise", "on_violation": ViolationPolicy.ISOLATE}, "on_violation_agrees_with_raise_mode",
     "kv-canary: on_violation='isolate' conflicts with mode='raise'; pass one of them"),
    ({"mode": " Raise", "on_violation": ViolationPolicy.LOG}, "on_violation_agrees_with_raise_mode",
     "kv-canary: on_violation='log' conflicts with mode='raise'; pass one of them"),
])
def test_each_rule_fires_with_its_code(kwargs: dict[str, object], slug: str, text: str) -> None:
    with pytest.raises(ValueError) as info:
        attach_config(**kwargs)  # type: ignore[arg-type]
    assert str(_refused(info, slug)).splitlines()[0] == text


@pytest.mark.parametrize("kwargs", [{"mode": 1}, {"real_kv": None}])
def test_a_non_string_is_a_type_error_naming_the_argument(kwargs: dict[str, object]) -> None:
    name = next(iter(kwargs))
    with pytest.raises(TypeError, match=rf"^kv-canary: {name} must be str, got ") as info:
        attach_config(**kwargs)  # type: ignore[arg-type]
    assert isinstance(_refused(info, f"{name}:type"), ContractTypeError)


def test_every_rule_has_its_own_code() -> None:
    codes = set()
    for kwargs in ({"real_kv": "none"}, {"mode": "off"}, {"mode": "raise", "on_violation": ViolationPolicy.LOG},
                   {"mode": 1}, {"real_kv": 2}, {"on_violation": "log"}):
        with pytest.raises(ContractError) as info:
            attach_config(**kwargs)
        codes.add(info.value.code)
    assert len(codes) == 6


def test_a_policy_name_is_read_by_attach_canaries_not_here() -> None:
    """attach_config takes the policy attach_canaries parsed (ViolationPolicy.parse, its own code)."""
    with pytest.raises(TypeError, match=r"^kv-canary: on_violation must be a ViolationPolicy or None, got str") as info:
        attach_config(on_violation="isolate")  # type: ignore[arg-type]
    assert isinstance(_refused(info, "on_violation:type"), ContractTypeError)

"""Backend selection: priority, forcing (keyword, context manager, environment), reasons, limits."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import torch

import kvcanary as kc
from kvcanary.ops.verify import VerifyLaunch
from kvcanary.registry import ENV_BACKEND, REGISTRY
from kvcanary.testing import calls

CALLS: list[str] = []


def _record(name: str) -> Any:
    def impl(call: VerifyLaunch) -> None:
        assert isinstance(call, VerifyLaunch)
        CALLS.append(name)

    return impl


# a module the fake backends' OpSupport.impl strings point at
fake_mod = types.ModuleType("kvcanary_fake_impls")
fake_mod.high = _record("high")  # type: ignore[attr-defined]
fake_mod.low = _record("low")  # type: ignore[attr-defined]
sys.modules["kvcanary_fake_impls"] = fake_mod


def _too_big(call: VerifyLaunch) -> Sequence[kc.Reason]:
    if call.plan.verify_capacity > 4:
        return [kc.Reason(kc.ReasonKind.LIMIT, "fake_high serves at most 4 entries", hint="use a smaller plan")]
    return []


@pytest.fixture
def fakes() -> Iterator[None]:
    high = kc.Backend("fake_high", "high priority, small plans only", {
        kc.Op.VERIFY: kc.OpSupport("kvcanary_fake_impls:high", {"cpu": 1000}, capture_safe=True, limits=_too_big)})
    low = kc.Backend("fake_low", "any size", {kc.Op.VERIFY: kc.OpSupport("kvcanary_fake_impls:low", {"cpu": 999},
                                                                            capture_safe=True)})
    kc.register_backend(high)
    kc.register_backend(low)
    CALLS.clear()
    yield
    REGISTRY.unregister("fake_high")
    REGISTRY.unregister("fake_low")


def test_entry_points_register_the_three_backends() -> None:
    assert {"torch_ref", "triton", "cuda"} <= set(kc.registered_backends())


def test_priority_and_per_call_limits(fakes: None) -> None:
    kw = calls.verify()  # capacity 8: too big for fake_high
    kc.launch_canary_verify_kernel(**kw)
    small = {**kw, "plan": calls.verify_plan(cap=4)}
    kc.launch_canary_verify_kernel(**small)
    assert CALLS == ["low", "high"]


def test_forcing_by_keyword_context_and_environment(fakes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    small = {**calls.verify(), "plan": calls.verify_plan(cap=4)}
    kc.launch_canary_verify_kernel(**small, backend="fake_low")
    with kc.use_backend("fake_low"):
        kc.launch_canary_verify_kernel(**small)
        kc.launch_canary_verify_kernel(**small, backend="fake_high")  # the keyword wins
    assert CALLS == ["low", "low", "high"]
    CALLS.clear()
    kc.launch_canary_verify_kernel(**small)  # automatic: fake_high; the environment is read now, unset
    monkeypatch.setenv(ENV_BACKEND, "fake_low")
    kc.launch_canary_verify_kernel(**small)  # read once per invalidate, not per launch
    REGISTRY.invalidate()
    kc.launch_canary_verify_kernel(**small)
    with kc.use_backend("fake_high"):  # the context manager wins over the environment
        kc.launch_canary_verify_kernel(**small)
    assert REGISTRY.env_backend() == "fake_low"
    monkeypatch.delenv(ENV_BACKEND)
    REGISTRY.invalidate()
    kc.launch_canary_verify_kernel(**small)
    assert CALLS == ["high", "high", "low", "high", "high"]


def test_forced_backend_that_cannot_serve_lists_its_reasons(fakes: None) -> None:
    with pytest.raises(kc.BackendError) as info:
        kc.launch_canary_verify_kernel(**calls.verify(), backend="fake_high")
    err = info.value
    assert err.forced == "fake_high" and list(err.reasons) == ["fake_high"]
    assert err.reasons["fake_high"][0].kind is kc.ReasonKind.LIMIT
    assert "fake_high serves at most 4 entries (hint: use a smaller plan)" in str(err)
    assert CALLS == []


def test_unknown_forced_name() -> None:
    with pytest.raises(kc.BackendError, match="no backend named 'nope' is registered"):
        kc.launch_canary_verify_kernel(**calls.verify(), backend="nope")


def test_no_backend_lists_every_backends_reasons() -> None:
    with pytest.raises(kc.BackendError) as info:
        REGISTRY.select(kc.Op.VERIFY, torch.device("meta"), backend="triton")
    assert "triton" in info.value.reasons
    explained = REGISTRY.explain(kc.Op.VERIFY, torch.device("cpu"))
    assert explained["torch_ref"] == []


def test_contract_errors_come_before_backend_errors() -> None:
    kw = calls.verify()
    kw["check_verify_expected_token"] = "yes"
    with pytest.raises(kc.ContractError):
        kc.launch_canary_verify_kernel(**kw, backend="nope")


def test_device_type_and_operation_reasons() -> None:
    only_cuda = kc.Backend("fake_cuda", "cuda only", {kc.Op.VERIFY: kc.OpSupport("kvcanary_fake_impls:high", {"cuda": 1})})
    reasons = only_cuda.static_reasons(kc.Op.VERIFY, torch.device("cpu"))
    assert [r.kind for r in reasons] == [kc.ReasonKind.DEVICE]
    assert [r.kind for r in only_cuda.static_reasons(kc.Op.WRITE, torch.device("cuda"))] == [kc.ReasonKind.OPERATION]


def test_broken_implementation_is_a_reason_not_a_crash() -> None:
    broken = kc.Backend("fake_broken", "points nowhere", {
        kc.Op.SCATTER: kc.OpSupport("kvcanary_no_such_module:f", {"cpu": 10_000})})
    kc.register_backend(broken)
    try:
        kc.launch_scatter_req_token_ids_kernel(**calls.scatter())  # falls back to torch_ref
        with pytest.raises(kc.BackendError, match="loading kvcanary_no_such_module:f failed"):
            kc.launch_scatter_req_token_ids_kernel(**calls.scatter(), backend="fake_broken")
    finally:
        REGISTRY.unregister("fake_broken")


def test_duplicate_registration_is_refused(fakes: None) -> None:
    with pytest.raises(ValueError, match="already registered"):
        kc.register_backend(kc.Backend("fake_low", "dup", {}))

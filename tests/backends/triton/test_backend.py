"""The triton backend's registration: every operation, capture-safe, priorities, and its refusal reasons."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import kvcanary as kc
from kvcanary.registry import REGISTRY
from kvcanary_backends import priority
from kvcanary_backends.triton import BACKEND, TritonBackend


def test_registered_through_the_entry_point() -> None:
    assert kc.registered_backends()["triton"] is BACKEND
    assert isinstance(BACKEND, TritonBackend)


def test_every_operation_is_capture_safe_with_the_documented_priorities() -> None:
    assert set(BACKEND.ops) == set(kc.Op)
    for op, support in BACKEND.ops.items():
        assert support.capture_safe, op
        assert not support.host_sync, op
        assert dict(support.devices) == {"cuda": 50, "cpu": 1}, op
        assert support.limits is None, op  # nothing to refuse: no op needs the optional plan scratch
        BACKEND.implementation(op)  # imports


def test_cpu_selection_keeps_torch_ref_and_cuda_prefers_triton() -> None:
    """On the CPU torch_ref serves every operation; on CUDA, of the two backends that can run there, the one
    the priority table ranks first (cuda where the head-to-head measured it ahead, triton elsewhere)."""
    for op in kc.Op:
        assert REGISTRY.select(op, torch.device("cpu")).backend.name == "torch_ref", op
    if not torch.cuda.is_available():
        return
    cuda_ok = not REGISTRY.get("cuda").static_reasons(kc.Op.VERIFY, torch.device("cuda"))
    for op in kc.Op:
        ranks = {b: priority.devices(b, op).get("cuda", -1) for b in ("triton", "cuda") if b == "triton" or cuda_ok}
        want = max(ranks, key=lambda b: ranks[b])
        assert REGISTRY.select(op, torch.device("cuda")).backend.name == want, op
    with kc.use_backend("triton"):
        assert REGISTRY.select(kc.Op.VERIFY, torch.device("cuda")).backend.name == "triton"


def test_cpu_needs_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    import kvcanary_backends.triton._jit as jit

    monkeypatch.setattr(jit, "INTERPRET", False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    reasons = BACKEND.device_reasons(kc.Op.VERIFY, torch.device("cpu"))
    assert [r.kind for r in reasons] == [kc.ReasonKind.INTERPRETER]
    monkeypatch.setattr(jit, "INTERPRET", True)
    assert not BACKEND.device_reasons(kc.Op.VERIFY, torch.device("cpu"))
    assert [r.kind for r in BACKEND.device_reasons(kc.Op.VERIFY, torch.device("cuda"))] == [
        kc.ReasonKind.INTERPRETER]


def test_missing_triton_is_a_package_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    assert [r.kind for r in BACKEND.availability()] == [kc.ReasonKind.PACKAGE]

"""The launchers' repeat-call path: a call that repeats a remembered one exactly replays its prepared launch.

A test backend serves verify on the CPU with a kernel split as ``OpSupport.prepare`` declares (``prepare(call)``
packs the call's addresses, the launch it returns records them). Each test checks what ran: the packing, the
replayed launch, or the plain kernel, and that every launch saw the call's current addresses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import kvcanary as kc
from kvcanary.ops.verify import VerifyLaunch
from kvcanary.registry import REGISTRY
from kvcanary.testing import calls
from kvcanary_contracts import ContractError

PREPARED: list[tuple[int, ...]] = []
"""The addresses each ``prepare`` packed."""
LAUNCHED: list[tuple[int, ...]] = []
"""The addresses each launch (replayed or not) launched with."""
PLAIN: list[tuple[int, ...]] = []
"""The addresses each plain kernel call (no prepare) launched with."""


def addresses(call: VerifyLaunch) -> tuple[int, ...]:
    """What a real backend's packing reads: the buffers' addresses (and a size)."""
    return (call.context.canary_buf.data_ptr(), call.plan.verify_slot_indices.data_ptr(),
            call.plan.verify_slot_indices.shape[0])


def kernel(call: VerifyLaunch) -> None:
    PLAIN.append(addresses(call))


def prepare(call: VerifyLaunch) -> Callable[[], None]:
    packed = addresses(call)
    PREPARED.append(packed)
    return lambda: LAUNCHED.append(packed)


@pytest.fixture
def backend() -> Iterator[kc.Backend]:
    b = kc.Backend("fake_prepared", "verify, split for repeated calls", {
        kc.Op.VERIFY: kc.OpSupport(kernel, {"cpu": 10_000}, capture_safe=True, prepare=prepare)})
    kc.register_backend(b)
    REGISTRY.explain(kc.Op.VERIFY, torch.device("cpu"))  # every backend's kernels imported (attaching invalidates)
    for log in (PREPARED, LAUNCHED, PLAIN):
        log.clear()
    yield b
    REGISTRY.unregister("fake_prepared")


def launch(kw: dict[str, Any], backend: str | None = "fake_prepared") -> None:
    kc.launch_canary_verify_kernel(**kw, backend=backend)


def test_a_repeated_call_replays_without_packing_again(backend: kc.Backend) -> None:
    kw = calls.verify()
    for _ in range(4):
        launch(kw)
    assert [addresses(VerifyLaunch.model_construct(**kw))] == PREPARED
    assert LAUNCHED == PREPARED * 4
    assert PLAIN == []


def test_new_addresses_are_packed_again(backend: kc.Backend) -> None:
    kw = calls.verify()
    launch(kw)
    launch(kw)
    other = calls.verify()  # the same metadata, other tensors
    launch(other)
    launch(other)
    launch(kw)  # back to the first ones: their launch was kept (two call sites in turn keep theirs)
    launch(other)
    want = [addresses(VerifyLaunch.model_construct(**k)) for k in (kw, other)]
    assert want == PREPARED
    assert [want[0], want[0], want[1], want[1], want[0], want[1]] == LAUNCHED


@pytest.mark.parametrize("change", [
    pytest.param(lambda kw: kw["context"].canary_buf.set_(kw["context"].canary_buf.clone()), id="storage swapped"),
    pytest.param(lambda kw: kw["plan"].verify_slot_indices.set_(torch.zeros(8, dtype=torch.int64)),
                 id="same size, new storage"),
])
def test_an_in_place_storage_swap_is_packed_again(backend: kc.Backend, change: Callable[[dict[str, Any]], Any]
                                                  ) -> None:
    kw = calls.verify()
    launch(kw)
    launch(kw)
    change(kw)
    launch(kw)
    now = addresses(VerifyLaunch.model_construct(**kw))
    assert len(PREPARED) == 2 and PREPARED[1] == now != PREPARED[0]
    assert LAUNCHED[-1] == now


def test_a_replay_is_void_once_the_registry_changes(backend: kc.Backend) -> None:
    kw = calls.verify()
    launch(kw, None)  # automatic choice: the fake backend has the highest priority on the CPU
    launch(kw, None)
    assert len(PREPARED) == 1 and len(LAUNCHED) == 2
    with kc.use_backend("torch_ref"):
        launch(kw, None)  # forced elsewhere by the context: the replay is not used
    assert len(LAUNCHED) == 2 and PLAIN == []
    launch(kw, None)
    REGISTRY.invalidate()
    launch(kw, None)
    assert len(PREPARED) == 3 and len(LAUNCHED) == 4  # prepared again after each change


def test_forcing_by_keyword_is_part_of_the_memo(backend: kc.Backend) -> None:
    kw = calls.verify()
    launch(kw)
    launch(kw, "torch_ref")  # another backend for the same call: no replay of the fake's launch
    launch(kw)
    assert len(PREPARED) == 1 and len(LAUNCHED) == 2


def test_a_kernel_without_prepare_runs_each_call(backend: kc.Backend) -> None:
    REGISTRY.register(kc.Backend("fake_prepared", "verify, not split", {
        kc.Op.VERIFY: kc.OpSupport(kernel, {"cpu": 10_000}, capture_safe=True)}), replace=True)
    kw = calls.verify()
    for _ in range(3):
        launch(kw)
    assert PREPARED == [] and LAUNCHED == [] and len(PLAIN) == 3


def test_prepare_returning_none_runs_the_kernel_and_tries_again(backend: kc.Backend) -> None:
    tries: list[int] = []

    def not_yet(call: VerifyLaunch) -> Callable[[], None] | None:
        tries.append(1)
        return None if len(tries) == 1 else prepare(call)

    REGISTRY.register(kc.Backend("fake_prepared", "verify, prepared from its second call", {
        kc.Op.VERIFY: kc.OpSupport(kernel, {"cpu": 10_000}, capture_safe=True, prepare=not_yet)}), replace=True)
    kw = calls.verify()
    for _ in range(3):
        launch(kw)
    assert len(tries) == 2 and len(PLAIN) == 1 and len(LAUNCHED) == 2


def test_a_launch_that_no_longer_holds_falls_back_to_the_kernel(backend: kc.Backend) -> None:
    holds = [True]

    def fragile(call: VerifyLaunch) -> Callable[[], bool | None]:
        packed = addresses(call)
        PREPARED.append(packed)

        def run() -> bool | None:
            if not holds[0]:
                return False
            LAUNCHED.append(packed)
            return None

        return run

    REGISTRY.register(kc.Backend("fake_prepared", "verify, a launch that can lapse", {
        kc.Op.VERIFY: kc.OpSupport(kernel, {"cpu": 10_000}, capture_safe=True, prepare=fragile)}), replace=True)
    kw = calls.verify()
    launch(kw)
    launch(kw)
    holds[0] = False
    launch(kw)  # the replay declines, and so does the one prepared again: the plain kernel runs
    assert len(PREPARED) == 2 and len(LAUNCHED) == 2 and len(PLAIN) == 1
    holds[0] = True
    launch(kw)  # nothing left in the memo: prepared again
    launch(kw)
    assert len(PREPARED) == 3 and len(LAUNCHED) == 4 and len(PLAIN) == 1


def test_limits_and_capture_unsafe_kernels_are_never_prepared(backend: kc.Backend) -> None:
    REGISTRY.register(kc.Backend("fake_prepared", "verify with limits", {
        kc.Op.VERIFY: kc.OpSupport(kernel, {"cpu": 10_000}, capture_safe=True, prepare=prepare,
                                   limits=lambda call: [])}), replace=True)
    kw = calls.verify()
    for _ in range(2):
        launch(kw)
    assert PREPARED == [] and len(PLAIN) == 2  # a limit reads the call's values: selection runs each call


def test_bad_calls_still_fail_after_replays(backend: kc.Backend) -> None:
    kw = calls.verify()
    launch(kw)
    launch(kw)
    ring = kw["context"].violation_ring
    bad = {**kw, "plan": kw["plan"].__class__(**{**kw["plan"].__dict__, "verify_slot_indices": ring.view(-1)[:8]})}
    with pytest.raises(ContractError):
        launch(bad)  # aliases the ring: the repeat path's address checks refuse it
    buf = kw["context"].canary_buf
    misaligned = torch.zeros(buf.numel() + 16, dtype=buf.dtype)[1:buf.numel() + 1].view(buf.shape)
    with pytest.raises(ContractError):
        launch({**kw, "context": kw["context"].__class__(**{**kw["context"].__dict__, "canary_buf": misaligned})})
    assert len(LAUNCHED) == 2 and PLAIN == []

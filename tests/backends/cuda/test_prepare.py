"""The cuda backend's prepared launches (``OpSupport.prepare``), on the CPU with the kernel cache and the
launch stubbed: each operation's ``prepare(call)`` binds exactly what its kernel would launch with (the
packed arguments, the compiled kernel of the call's specialization, the grid its ``shape`` sizes), and the
kernel itself is ``prepare(call)()``."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

import kvcanary_backends.cuda._pack as pack_mod
from kvcanary.registry import Op
from kvcanary.testing import calls
from kvcanary_backends.cuda import plan, plan_entries, plan_offsets, scatter, verify, write
from kvcanary_backends.cuda._pack import KernelCache

MODULES: dict[Op, ModuleType] = {Op.VERIFY: verify, Op.WRITE: write, Op.PLAN: plan, Op.PLAN_OFFSETS: plan_offsets,
                                 Op.PLAN_ENTRIES: plan_entries, Op.SCATTER: scatter}
RESIDENT = 5


class FakeCompiled:
    max_blocks = RESIDENT

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    log: list[tuple[Any, ...]] = []

    def get(self: KernelCache, device_index: int, key: tuple[Any, ...]) -> FakeCompiled:
        return FakeCompiled(key)

    def prepared(compiled: FakeCompiled, device_index: int, shape: tuple[int, ...], args: Any) -> Callable[[], None]:
        bound = (compiled.key, shape, tuple(args))
        return lambda: log.append(bound)

    monkeypatch.setattr(KernelCache, "get", get)
    monkeypatch.setattr(pack_mod, "prepared", prepared)
    return log


@pytest.mark.parametrize("op", list(MODULES), ids=lambda op: op.value)
def test_prepare_binds_what_the_kernel_launches(op: Op, launched: list[tuple[Any, ...]]) -> None:
    mod = MODULES[op]
    call = op.contract.model_construct(**calls.of(op, "cpu"))
    key, sizes, args = mod.pack(call)
    shape = mod.shape(key, sizes, RESIDENT)
    run = mod.prepare(call)
    assert launched == []  # preparing launches nothing
    run()
    run()
    want = [] if shape is None else [(key, shape, args)] * 2
    assert want == launched
    assert op.kernels["cuda"].prepare is mod.prepare
    impl = op.kernels["cuda"].impl
    assert callable(impl)
    impl(call)  # the kernel is the prepared launch, run once
    assert (want + want[:1]) == launched

"""The host-side launch path (``_jit.Launcher``, ``_jit.ObjectCache``), with a stand-in for Triton's kernel.

On the GPU the fast path skips Triton's per-call binding; these checks run it on the CPU against a fake
JIT function: the first call of a key goes through ``fn[grid](...)``, later ones call the kept compiled
kernel's launcher with every parameter in signature order (constexprs last), and a new key, grid or
constexpr goes through Triton again. With the direct path on (stand-ins for its cuda.core parts), a kept
variant launches through cuda.core with its packed parameters, each call reading ``Launcher.direct``; a
refused variant, or an empty grid, keeps Triton's compiled launcher. The context cache recomputes only for
a new object and forgets dead ones. Every kernel of the backend is declared so that the fast path applies
(constexprs last, no value or alignment specialisation).
"""

from __future__ import annotations

import gc
from typing import Any

import pytest
import torch
import triton.language as tl

import kvcanary_backends.triton._jit as jit
from kvcanary_backends.triton import _direct


def _kern(a: Any, n: Any, b: Any, X: tl.constexpr, Y: tl.constexpr) -> None:
    """A stand-in kernel signature: two constexprs last."""


class _FakeCompiled:
    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def __getitem__(self, grid: tuple[int, int, int]) -> Any:
        def runner(*args: Any, stream: Any = None) -> None:
            self.log.append(("fast", grid, args, stream))

        return runner


class _FakeJit:
    def __init__(self) -> None:
        self.fn = _kern
        self.log: list[Any] = []

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **kw: Any) -> _FakeCompiled:
            self.log.append(("triton", grid, args, kw))
            return _FakeCompiled(self.log)

        return launch


class _Drv:
    class active:
        @staticmethod
        def get_current_device() -> int:
            return 0

        @staticmethod
        def get_current_stream(dev: int) -> int:
            return 77


def test_fast_path_keeps_the_compiled_kernel_and_passes_the_signature_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit.Launcher, "fast", True)
    monkeypatch.setattr(jit, "_driver", lambda: _Drv)
    fake = _FakeJit()
    launch = jit.Launcher(fake)
    assert launch.const_names == ["X", "Y"]
    t = torch.zeros(2)
    launch((4,), "k", (t, 5, None), (True, 8), 2)
    assert fake.log[-1] == ("triton", (4,), (t, 5, None), {"X": True, "Y": 8, "num_warps": 2})
    launch((4,), "k", (t, 6, None), (True, 8), 2)
    assert fake.log[-1] == ("fast", (4, 1, 1), (t, 6, None, True, 8), 77)
    for grid, key, consts, warps in [((5,), "k", (True, 8), 2), ((4,), "k2", (True, 8), 2),
                                     ((4,), "k", (False, 8), 2), ((4,), "k", (True, 8), 4)]:
        launch(grid, key, (t, 6, None), consts, warps)
        assert fake.log[-1][0] == "triton", (grid, key, consts, warps)
    assert sum(1 for e in fake.log if e[0] == "triton") == 5


def test_interpreter_always_goes_through_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit.Launcher, "fast", False)
    fake = _FakeJit()
    launch = jit.Launcher(fake)
    for _ in range(3):
        launch((1, 2), "k", (1, 2, 3), (False, 1), 1)
    assert [e[0] for e in fake.log] == ["triton"] * 3


def test_type_key_and_fits32() -> None:
    a, b = torch.zeros(1, dtype=torch.int64), torch.zeros(1, dtype=torch.int32)
    assert jit.type_key([a, 3, None]) != jit.type_key([b, 3, None])
    assert jit.type_key([a, 3, None]) != jit.type_key([a, 1 << 40, None])
    assert jit.type_key([a, 3, None]) == jit.type_key([a, 1 << 20, None])
    assert jit.fits32(0, 5, (1 << 31) - 1) and not jit.fits32(3, 1 << 31)


def test_object_cache_recomputes_only_for_a_new_object() -> None:
    class Obj:
        pass

    cache = jit.ObjectCache()
    calls: list[int] = []

    def make(o: Any) -> int:
        calls.append(id(o))
        return len(calls)

    a = Obj()
    assert cache.get(a, make) == 1 and cache.get(a, make) == 1
    b = Obj()
    assert cache.get(b, make) == 2
    del a
    gc.collect()
    assert len(cache._entries) == 1


def test_every_kernel_qualifies_for_the_fast_path() -> None:
    from kvcanary_backends.triton import plan, plan_entries, plan_offsets, scatter, verify, write

    for mod in (plan, plan_entries, plan_offsets, scatter, verify, write):
        launch = mod._LAUNCH
        assert launch._ordered, mod.__name__
        fn = launch.fn
        params = getattr(fn, "params", None)
        if params is not None:  # compiled-mode JITFunction (the interpreter's has no specialisation)
            assert all(p.do_not_specialize for p in params if not p.is_constexpr), mod.__name__


CURRENT = [0]


class _MovingDrv:
    class active:
        @staticmethod
        def get_current_device() -> int:
            return CURRENT[0]

        @staticmethod
        def get_current_stream(dev: int) -> int:
            return 77


def _first_launch(monkeypatch: pytest.MonkeyPatch) -> tuple[_FakeJit, jit.Launcher, torch.Tensor]:
    monkeypatch.setattr(jit.Launcher, "fast", True)
    monkeypatch.setattr(jit, "_driver", lambda: _MovingDrv)
    CURRENT[0] = 0
    fake = _FakeJit()
    launch = jit.Launcher(fake)
    t = torch.zeros(2)
    assert launch.prepare((4,), "k", (t, 5, None), (True, 8), 2) is None  # nothing compiled yet
    launch((4,), "k", (t, 5, None), (True, 8), 2)
    return fake, launch, t


def test_a_prepared_launch_binds_every_argument_tensors_as_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, launch, t = _first_launch(monkeypatch)
    run = launch.prepare((4,), "k", (t, 6, None), (True, 8), 2)
    assert run is not None
    for _ in range(2):
        assert run() is None
        assert fake.log[-1] == ("fast", (4, 1, 1), (t.data_ptr(), 6, None, True, 8), 77)
    assert launch.prepare((5,), "k", (t, 6, None), (True, 8), 2) is None  # another grid: not compiled yet


def test_a_prepared_launch_declines_once_its_inputs_change(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, launch, t = _first_launch(monkeypatch)
    run = launch.prepare((4,), "k", (t, 6, None), (True, 8), 2)
    assert run is not None
    monkeypatch.setitem(jit.TUNING, "verify_block", jit.TUNING["verify_block"])  # a launch shape set: void
    n = len(fake.log)
    assert run() is False and len(fake.log) == n
    run = launch.prepare((4,), "k", (t, 6, None), (True, 8), 2)
    assert run is not None and run() is None
    CURRENT[0] = 1
    assert run() is False  # another device is current
    CURRENT[0] = 0
    assert run() is None
    monkeypatch.setattr(jit.Launcher, "fast", False)
    assert run() is False
    assert launch.prepare((4,), "k", (t, 6, None), (True, 8), 2) is None  # no fast path: nothing to prepare


def test_tuning_counts_its_changes() -> None:
    tuning = jit.Tuning({"a": 1})
    seen = [tuning.version]
    for change in (lambda: tuning.__setitem__("a", 2), lambda: tuning.update(b=3), lambda: tuning.pop("b"),
                   lambda: tuning.setdefault("c", 4), lambda: tuning.__delitem__("c")):
        change()
        assert tuning.version > seen[-1]
        seen.append(tuning.version)
    assert dict(tuning) == {"a": 2}


def test_every_kernel_is_prepared_for_repeated_calls() -> None:
    from kvcanary_backends.triton import fold, plan, plan_entries, plan_offsets, scatter, verify, write

    for mod in (fold, plan, plan_entries, plan_offsets, scatter, verify, write):
        op_kernels = [k for op in __import__("kvcanary").Op for k in [op.kernels.get("triton")] if k is not None]
        assert any(k.prepare is mod.prepare for k in op_kernels), mod.__name__


class _DirectLog:
    """Stand-ins for the direct path's cuda.core parts: a variant whose packer tags its values, a config per
    grid, a stream per (device, handle) and a launch function that logs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, refuse: str | None = None) -> None:
        self.log: list[Any] = []
        self.loads = 0

        def load(compiled: Any, device: int) -> Any:
            self.loads += 1
            if refuse is not None:
                return refuse
            pack = lambda values: ("packed", *values)  # noqa: E731
            return _direct.Variant("kernel", pack, 64, 0, device)  # type: ignore[arg-type]

        monkeypatch.setattr(_direct, "load", load)
        monkeypatch.setattr(_direct, "config", lambda variant, grid: ("cfg", grid))
        monkeypatch.setattr(_direct, "stream_function", lambda: lambda device, handle: ("stream", device, handle))
        monkeypatch.setattr(jit, "_launch_fn", lambda: lambda *a: self.log.append(("direct", *a)))


def test_the_direct_path_launches_kept_variants_through_cuda_core(monkeypatch: pytest.MonkeyPatch) -> None:
    direct = _DirectLog(monkeypatch)
    fake, launch, t = _first_launch(monkeypatch)
    monkeypatch.setattr(jit.Launcher, "direct", True)
    assert direct.loads == 1 and not launch.direct_refusals()
    launch((4,), "k", (t, 6, None), (True, 8), 2)
    assert direct.log[-1] == ("direct", ("stream", 0, 77), ("cfg", (4, 1, 1)), "kernel", "packed", t, 6, None)
    run = launch.prepare((4,), "k", (t, 7, None), (True, 8), 2)
    assert run is not None and run() is None
    assert direct.log[-1] == ("direct", ("stream", 0, 77), ("cfg", (4, 1, 1)), "kernel", "packed",
                              t, 7, None)  # packed once, at prepare
    n = len(fake.log)
    monkeypatch.setattr(jit.Launcher, "direct", False)  # read at each call: Triton's launcher now
    assert run() is None
    assert fake.log[-1] == ("fast", (4, 1, 1), (t.data_ptr(), 7, None, True, 8), 77) and len(fake.log) == n + 1
    launch((4,), "k", (t, 8, None), (True, 8), 2)
    assert fake.log[-1] == ("fast", (4, 1, 1), (t, 8, None, True, 8), 77)
    launch((5,), "k", (t, 8, None), (True, 8), 2)  # a new grid of a loaded variant: no second load
    assert direct.loads == 1
    launch((0,), "k", (t, 8, None), (True, 8), 2)  # an empty grid (Triton's launcher skips it) keeps Triton's
    monkeypatch.setattr(jit.Launcher, "direct", True)
    k = len(direct.log)
    launch((0,), "k", (t, 8, None), (True, 8), 2)
    assert len(direct.log) == k and fake.log[-1][:2] == ("fast", (0, 1, 1))


def test_a_refused_variant_keeps_tritons_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    direct = _DirectLog(monkeypatch, refuse="cooperative launch")
    fake, launch, t = _first_launch(monkeypatch)
    monkeypatch.setattr(jit.Launcher, "direct", True)
    assert list(launch.direct_refusals().values()) == ["cooperative launch"]
    launch((4,), "k", (t, 6, None), (True, 8), 2)
    run = launch.prepare((4,), "k", (t, 6, None), (True, 8), 2)
    assert run is not None and run() is None
    assert not direct.log and [e[0] for e in fake.log[-2:]] == ["fast", "fast"]


def test_a_register_cap_reaches_triton_only_when_set_and_is_its_own_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, launch, t = _first_launch(monkeypatch)
    assert fake.log[-1][3] == {"X": True, "Y": 8, "num_warps": 2}  # no cap: Triton's options as before
    assert launch.prepare((4,), "k", (t, 6, None), (True, 8), 2, maxnreg=64) is None  # not compiled with it yet
    launch((4,), "k", (t, 6, None), (True, 8), 2, maxnreg=64)
    assert fake.log[-1] == ("triton", (4,), (t, 6, None), {"X": True, "Y": 8, "num_warps": 2, "maxnreg": 64})
    launch((4,), "k", (t, 7, None), (True, 8), 2, maxnreg=64)
    assert fake.log[-1] == ("fast", (4, 1, 1), (t, 7, None, True, 8), 77)
    run = launch.prepare((4,), "k", (t, 8, None), (True, 8), 2, maxnreg=64)
    assert run is not None and run() is None
    assert fake.log[-1] == ("fast", (4, 1, 1), (t.data_ptr(), 8, None, True, 8), 77)
    launch((4,), "k", (t, 6, None), (True, 8), 2, maxnreg=80)  # another cap: compiled anew
    assert fake.log[-1][0] == "triton" and fake.log[-1][3]["maxnreg"] == 80
    monkeypatch.setattr(jit.Launcher, "fast", False)  # the interpreter's path passes it on too
    launch((4,), "k", (t, 6, None), (True, 8), 2, maxnreg=64)
    assert fake.log[-1] == ("triton", (4,), (t, 6, None), {"X": True, "Y": 8, "num_warps": 2, "maxnreg": 64})

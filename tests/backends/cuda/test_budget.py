"""verify_budget: the CUDA kernel against torch_ref (cases: tests/backends/_budget.py), through the host
emulation on the CPU and compiled on a GPU (``gpu`` marker). The emulation bypasses the backend's ``prepare``,
so its batches hold at least one request; the GPU runs empty batches too."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch

from kvcanary.registry import REGISTRY, register_backend
from tests.backends import _budget as b
from tests.backends.cuda import _emu, _support


@pytest.fixture
def emulated() -> Iterator[str]:
    register_backend(_emu.BACKEND, replace=True)
    yield "cuda_emu"
    REGISTRY.unregister("cuda_emu")


@pytest.mark.skipif(_emu.compiler() is None, reason="no C++ compiler (g++) for the host emulation")
@pytest.mark.parametrize("seed", range(3))
def test_emulated_kernel_matches_torch_ref(seed: int, emulated: str) -> None:
    assert b.mismatches(random.Random(seed), torch.device("cpu"), emulated, cases=5, min_bs=1) == []


@pytest.mark.skipif(_emu.compiler() is None, reason="no C++ compiler (g++) for the host emulation")
@pytest.mark.parametrize("seed", range(2))
def test_emulated_kernel_matches_torch_ref_over_sliding_windows(seed: int, emulated: str) -> None:
    assert b.sliding_mismatches(random.Random(seed), torch.device("cpu"), emulated, cases=6) == []


@pytest.mark.skipif(_emu.compiler() is None, reason="no C++ compiler (g++) for the host emulation")
def test_emulated_overflow_counter_gains_one_minus_enable(emulated: str) -> None:
    assert b.overflow_counts(torch.device("cpu"), emulated, min_bs=1) == []


@pytest.mark.skipif(_emu.compiler() is None, reason="no C++ compiler (g++) for the host emulation")
def test_emulated_repeated_launch_counts_each_overflow(emulated: str) -> None:
    assert b.repeated_counts(torch.device("cpu"), emulated) == [1, 1, 2]


@pytest.mark.skipif(_emu.compiler() is None, reason="no C++ compiler (g++) for the host emulation")
def test_emulated_kernel_writes_nothing_outside_the_outputs(emulated: str) -> None:
    assert b.writes_outside(random.Random(7), torch.device("cpu"), emulated, cases=20) == []


_SKIP = _support.cuda_skip_reason()


@pytest.mark.gpu
@pytest.mark.skipif(_SKIP is not None, reason=f"cuda backend unavailable: {_SKIP}")
@pytest.mark.parametrize("seed", range(4))
def test_gpu_kernel_matches_torch_ref(seed: int) -> None:
    assert b.mismatches(random.Random(seed), torch.device("cuda"), "cuda", cases=60) == []


@pytest.mark.gpu
@pytest.mark.skipif(_SKIP is not None, reason=f"cuda backend unavailable: {_SKIP}")
@pytest.mark.parametrize("seed", range(2))
def test_gpu_kernel_matches_torch_ref_over_sliding_windows(seed: int) -> None:
    assert b.sliding_mismatches(random.Random(seed), torch.device("cuda"), "cuda", cases=40) == []


@pytest.mark.gpu
@pytest.mark.skipif(_SKIP is not None, reason=f"cuda backend unavailable: {_SKIP}")
def test_gpu_overflow_counter_gains_one_minus_enable() -> None:
    assert b.overflow_counts(torch.device("cuda"), "cuda") == []


@pytest.mark.gpu
@pytest.mark.skipif(_SKIP is not None, reason=f"cuda backend unavailable: {_SKIP}")
def test_gpu_repeated_launch_counts_each_overflow() -> None:
    assert b.repeated_counts(torch.device("cuda"), "cuda") == [1, 1, 2]


@pytest.mark.gpu
@pytest.mark.skipif(_SKIP is not None, reason=f"cuda backend unavailable: {_SKIP}")
def test_gpu_kernel_writes_nothing_outside_the_outputs() -> None:
    assert b.writes_outside(random.Random(7), torch.device("cuda"), "cuda", cases=200) == []

"""Engine-sized parity (GPU), and the same builders run tiny on the CPU so they are exercised everywhere."""

from __future__ import annotations

import os
import random
import time

import pytest
import torch

import kvcanary as kc
from kvcanary.testing.builders import Call
from kvcanary.testing.parity import check_call
from tests.backends.triton._support import device
from tools.scenarios import large_plan_call, large_verify_call, large_write_call

DEV = device()
SEED = int(os.environ.get("KVCANARY_TEST_SEED", time.time_ns() % 2**32))
MODES = list(kc.RealKvHashMode)


def _check(call: Call) -> None:
    problems = check_call(call, DEV, "triton")
    assert not problems, f"KVCANARY_TEST_SEED={SEED}: {problems}"


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_small_builders(mode: kc.RealKvHashMode) -> None:
    rng = random.Random(SEED + int(mode))
    _check(large_verify_call(rng, chains=3, length=6, sources=2, mode=mode, corruptions=2, num_slots=64))
    _check(large_write_call(rng, requests=2, length=9, sources=2, mode=mode, num_slots=64))
    _check(large_plan_call(rng, bs=5, max_prefix=12, window=int(mode) * 3, pool=mode != 0, num_slots=64))


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_large_verify(mode: kc.RealKvHashMode) -> None:
    rng = random.Random(SEED + 10 + int(mode))
    _check(large_verify_call(rng, chains=256, length=400, sources=4, mode=mode, corruptions=40, num_slots=1 << 17,
                             ring=1 << 12))


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_large_write(mode: kc.RealKvHashMode) -> None:
    rng = random.Random(SEED + 20 + int(mode))
    _check(large_write_call(rng, requests=1, length=20000, sources=3, mode=mode, num_slots=1 << 16))
    _check(large_write_call(rng, requests=300, length=33, sources=2, mode=mode, num_slots=1 << 16))


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(("swa", "pool"), [(0, False), (0, True), (700, True)])
def test_large_plan(swa: int, pool: bool) -> None:
    rng = random.Random(SEED + 30 + swa)
    _check(large_plan_call(rng, bs=256, max_prefix=3000, window=swa, pool=pool, num_slots=1 << 16))
    _check(large_plan_call(rng, bs=4096, max_prefix=64, window=swa, pool=pool, num_slots=1 << 16))

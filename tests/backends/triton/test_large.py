"""Engine-sized parity (GPU), and the same builders run tiny on the CPU so they are exercised everywhere."""

from __future__ import annotations

import os
import random
import time

import pytest
import torch

import kvcanary as kc
from kvcanary.testing.parity import check_call
from kvcanary.testing.scenarios import Call
from tests.backends.triton import _large
from tests.backends.triton._support import device

DEV = device()
SEED = int(os.environ.get("KVCANARY_TEST_SEED", time.time_ns() % 2**32))
MODES = list(kc.RealKvHashMode)


def _check(call: Call) -> None:
    problems = check_call(call, DEV, "triton")
    assert not problems, f"KVCANARY_TEST_SEED={SEED}: {problems}"


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_small_builders(mode: kc.RealKvHashMode) -> None:
    rng = random.Random(SEED + int(mode))
    _check(_large.verify_call(rng, num_slots=64, nreq=3, length=6, mode=mode, num_sources=2, corruptions=2))
    _check(_large.write_call(rng, num_slots=64, nreq=2, length=9, mode=mode, num_sources=2))
    _check(_large.plan_call(rng, bs=5, max_seq=12, num_slots=64, swa=int(mode) * 3, with_pool=mode != 0))


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_large_verify(mode: kc.RealKvHashMode) -> None:
    rng = random.Random(SEED + 10 + int(mode))
    _check(_large.verify_call(rng, num_slots=1 << 17, nreq=256, length=400, mode=mode, num_sources=4,
                              corruptions=40, ring=1 << 12))


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
def test_large_write(mode: kc.RealKvHashMode) -> None:
    rng = random.Random(SEED + 20 + int(mode))
    _check(_large.write_call(rng, num_slots=1 << 16, nreq=1, length=20000, mode=mode, num_sources=3))
    _check(_large.write_call(rng, num_slots=1 << 16, nreq=300, length=33, mode=mode, num_sources=2))


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize(("swa", "pool"), [(0, False), (0, True), (700, True)])
def test_large_plan(swa: int, pool: bool) -> None:
    rng = random.Random(SEED + 30 + swa)
    _check(_large.plan_call(rng, bs=256, max_seq=3000, num_slots=1 << 16, swa=swa, with_pool=pool))
    _check(_large.plan_call(rng, bs=4096, max_seq=64, num_slots=1 << 16, swa=swa, with_pool=pool))

"""verify_budget: the Triton kernel against torch_ref (cases: tests/backends/_budget.py), on the device under
test (the interpreter on the CPU), and one decode step worked by hand."""

from __future__ import annotations

import random

import pytest
import torch

from tests.backends import _budget as b
from tests.backends.triton._support import device

DEV = device()


@pytest.mark.parametrize("seed", range(6))
def test_triton_matches_torch_ref(seed: int) -> None:
    assert b.mismatches(random.Random(seed), DEV, "triton", cases=6 if DEV.type == "cpu" else 60) == []


@pytest.mark.parametrize("seed", range(2))
def test_triton_matches_torch_ref_over_sliding_windows(seed: int) -> None:
    assert b.sliding_mismatches(random.Random(seed), DEV, "triton", cases=3 if DEV.type == "cpu" else 40) == []


@pytest.mark.parametrize("backend", ["torch_ref", "triton"])
def test_the_overflow_counter_gains_one_minus_enable(backend: str) -> None:
    assert b.overflow_counts(torch.device("cpu") if backend == "torch_ref" else DEV, backend) == []


@pytest.mark.parametrize("backend", ["torch_ref", "triton"])
def test_a_repeated_launch_counts_each_overflow(backend: str) -> None:
    assert b.repeated_counts(torch.device("cpu") if backend == "torch_ref" else DEV, backend) == [1, 1, 2]


@pytest.mark.parametrize("backend", ["torch_ref", "triton"])
def test_garbage_offsets_write_nothing_outside_the_outputs(backend: str) -> None:
    dev = torch.device("cpu") if backend == "torch_ref" else DEV
    assert b.writes_outside(random.Random(7), dev, backend, cases=20 if DEV.type == "cpu" else 200) == []


def test_a_decode_step_keeps_the_newest_and_a_moving_window() -> None:
    """By hand: 2 requests of 10 and 3 entries, newest 2, stride 3 (rows 1 and 2). Request 0 slides (an SWA
    window of positions 40..49), its cursor at position 46: it keeps older 6, 7 and, wrapped, 0 (in plan order:
    0, 6, 7) and its newest 8, 9; request 1 (positions 0..2, 1 older entry) keeps all 3. The cursors move to
    40 + (6 + 3) mod 8 = 41 and 0 + (0 + 3) mod 1 = 0; when the full plan overflowed (enable 0), to 46 and 0."""
    plan = torch.arange(100, 113, dtype=torch.int64)
    kw: b.Kwargs = {
        "req_pool_indices": torch.tensor([1, 2]), "verify_offsets_scratch": torch.tensor([0, 10, 13]),
        "verify_num_valid": torch.tensor([13], dtype=torch.int32), "verify_enable": torch.tensor([1], dtype=torch.int32),
        "cursor": torch.tensor([5, 46, 0]), "advance": torch.tensor([1]),
        "out_verify_num_valid": torch.zeros(1, dtype=torch.int32), "out_verify_enable": torch.zeros(1, dtype=torch.int32),
        "newest_per_request": 2, "stride": 3,
    }
    for name in b.PLAN:
        kw[name] = plan.clone()
        kw["out_" + name] = torch.zeros(16, dtype=torch.int64)
    kw["verify_expected_positions"] = torch.tensor([*range(40, 50), 0, 1, 2])
    for enable, cursors in ((1, [5, 41, 0]), (0, [5, 46, 0])):
        kw["verify_enable"] = torch.tensor([enable], dtype=torch.int32)
        for backend, dev in (("torch_ref", torch.device("cpu")), ("triton", DEV)):
            got = b.run(kw, dev, backend)
            n = int(got["out_verify_num_valid"][0])
            assert got["out_verify_slot_indices"][:n].tolist() == [100, 106, 107, 108, 109, 110, 111, 112], backend
            assert got["out_verify_expected_positions"][:n].tolist() == [40, 46, 47, 48, 49, 0, 1, 2], backend
            assert got["cursor"].tolist() == cursors, (backend, enable)
            assert int(got["out_verify_enable"][0]) == enable, backend

"""verify_budget: the Triton kernel against torch_ref, byte for byte on the entries it defines.

Random batches (requests of no entries, of only newest ones, of fewer older entries than the stride and of
many), cursors past a request's older entries, a full plan cut short (overflow, enable 0), kept entries past
the output's capacity, the cursors held back (``advance`` 0) and an empty batch. Triton runs on the device
under test (its interpreter on the CPU); torch_ref on the CPU. Compared: the count, the enable, the cursors
and the kept entries below the count (past it the output is undefined).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from kvcanary.launch.budget import launch_verify_budget_kernel
from tests.backends.triton._support import device

DEV = device()
_PLAN = ("verify_slot_indices", "verify_expected_tokens", "verify_expected_positions", "verify_prev_slot_indices")
Kwargs = dict[str, Any]


def _call(rng: random.Random, *, bs: int, cap_in: int, cap_out: int, rows: int) -> Kwargs:
    counts = [rng.choice([0, 1, 2, 3, 5, 9, rng.randint(10, 40)]) for _ in range(bs)]
    off = [0]
    for c in counts:
        off.append(off[-1] + c)
    total = off[-1]
    n = min(total, cap_in, rng.choice([total, total, rng.randint(0, max(total, 1))]))
    g = torch.Generator().manual_seed(rng.getrandbits(62))
    kw: Kwargs = {
        "req_pool_indices": torch.tensor(rng.sample(range(rows), bs), dtype=torch.int64),
        "verify_offsets_scratch": torch.tensor(off + [rng.randint(0, 9)] * 3, dtype=torch.int64),
        "verify_num_valid": torch.tensor([n], dtype=torch.int32),
        "verify_enable": torch.tensor([int(n == min(total, cap_in) and total <= cap_in)], dtype=torch.int32),
        "cursor": torch.randint(0, 60, (rows,), dtype=torch.int64, generator=g),
        "advance": torch.tensor([rng.choice([0, 1, 1])], dtype=torch.int64),
        "out_verify_num_valid": torch.tensor([-7], dtype=torch.int32),
        "out_verify_enable": torch.tensor([-7], dtype=torch.int32),
        "newest_per_request": rng.choice([0, 1, 2, 3]), "stride": rng.choice([1, 2, 4, 7]),
    }
    for name in _PLAN:
        kw[name] = torch.randint(-(2**40), 2**40, (cap_in,), dtype=torch.int64, generator=g)
        kw["out_" + name] = torch.full((cap_out,), -9, dtype=torch.int64)
    return kw


def _run(kw: Kwargs, dev: torch.device, backend: str) -> Kwargs:
    mine: Kwargs = {k: v.to(dev, copy=True) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    launch_verify_budget_kernel(**mine, backend=backend)
    return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in mine.items()}


@pytest.mark.parametrize("seed", range(6))
def test_triton_matches_torch_ref(seed: int) -> None:
    rng = random.Random(seed)
    for case in range(6 if DEV.type == "cpu" else 60):
        kw = _call(rng, bs=rng.choice([0, 1, rng.randint(2, 9)]), cap_in=rng.choice([1, 50, 300]),
                   cap_out=rng.choice([3, 24, 96]), rows=12)
        want = _run(kw, torch.device("cpu"), "torch_ref")
        got = _run(kw, DEV, "triton")
        where = (seed, case)
        n = int(want["out_verify_num_valid"][0])
        assert int(got["out_verify_num_valid"][0]) == n, where
        assert torch.equal(got["out_verify_enable"], want["out_verify_enable"]), where
        assert torch.equal(got["cursor"], want["cursor"]), where
        for name in _PLAN:
            out = "out_" + name
            assert torch.equal(got[out][:n], want[out][:n]), (where, name)


def test_a_decode_step_keeps_the_newest_and_a_moving_window() -> None:
    """By hand: 2 requests of 10 and 3 entries, newest 2, stride 3, cursors 6 and 0 (rows 1 and 2). Request 0
    keeps older 6, 7 and, wrapped, 0 (in plan order: 0, 6, 7) and its newest 8, 9; request 1 (1 older entry)
    keeps all 3. The cursors move to (6 + 3) mod 8 = 1 and (0 + 3) mod 1 = 0."""
    plan = torch.arange(100, 113, dtype=torch.int64)
    kw: Kwargs = {
        "req_pool_indices": torch.tensor([1, 2]), "verify_offsets_scratch": torch.tensor([0, 10, 13]),
        "verify_num_valid": torch.tensor([13], dtype=torch.int32), "verify_enable": torch.tensor([1], dtype=torch.int32),
        "cursor": torch.tensor([5, 6, 0]), "advance": torch.tensor([1]),
        "out_verify_num_valid": torch.zeros(1, dtype=torch.int32), "out_verify_enable": torch.zeros(1, dtype=torch.int32),
        "newest_per_request": 2, "stride": 3,
    }
    for name in _PLAN:
        kw[name] = plan.clone()
        kw["out_" + name] = torch.zeros(16, dtype=torch.int64)
    for backend, dev in (("torch_ref", torch.device("cpu")), ("triton", DEV)):
        got = _run(kw, dev, backend)
        n = int(got["out_verify_num_valid"][0])
        assert got["out_verify_slot_indices"][:n].tolist() == [100, 106, 107, 108, 109, 110, 111, 112], backend
        assert got["cursor"].tolist() == [5, 1, 0], backend
        assert int(got["out_verify_enable"][0]) == 1, backend

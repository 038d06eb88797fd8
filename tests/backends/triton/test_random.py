"""Fresh random scenarios every run: triton on the device under test against torch_ref on the CPU.

Realistic and hostile inputs from ``kvcanary.testing.scenarios`` (out-of-range slots, predecessors, LUT
entries and rows, negative counts, enable 0 or 2, offsets past the token arrays, a full ring), plus the two
plan stages alone. The seed comes from the clock, or from ``KVCANARY_TEST_SEED`` to replay a failure; a
failing case prints it. Writes drop what torch_ref leaves unspecified for a parallel backend first
(``_support.without_unspecified``). On the CPU the interpreter is slow, so each run draws a few small cases.
"""

from __future__ import annotations

import os
import random
import time
import zlib
from collections.abc import Callable

import pytest
import torch

from kvcanary.registry import Op
from kvcanary.testing.parity import check_call
from kvcanary.testing.scenarios import GENERATORS, Call
from tests.backends.triton._support import (
    device,
    plan_entries_call,
    plan_offsets_call,
    unspecified_parts,
    without_unspecified,
)

DEV = device()
SEED = int(os.environ.get("KVCANARY_TEST_SEED", time.time_ns() % 2**32))
# cases per (operation, hostility) and run: the interpreter runs at a few ms per serial write step
CASES = 25 if DEV.type == "cuda" else 8

Generator = Callable[..., Call]
OPS: dict[str, Generator] = {
    "verify": GENERATORS[Op.VERIFY],
    "write": lambda rng, hostile: without_unspecified(GENERATORS[Op.WRITE](rng, hostile=hostile)),
    "plan": GENERATORS[Op.PLAN],
    "scatter": GENERATORS[Op.SCATTER],
    "plan_offsets": plan_offsets_call,
    "plan_entries": plan_entries_call,
}


@pytest.mark.parametrize("hostile", [False, True], ids=["realistic", "hostile"])
@pytest.mark.parametrize("op", list(OPS))
def test_random_parity(op: str, hostile: bool) -> None:
    seed = SEED ^ zlib.crc32(f"{op}/{hostile}".encode())
    rng = random.Random(seed)
    for k in range(CASES):
        call = OPS[op](rng, hostile=hostile)
        problems = check_call(call, DEV, "triton")
        assert not problems, (f"{op} case {k} ({call.label}, hostile={hostile}) differs from torch_ref; "
                              f"replay with KVCANARY_TEST_SEED={SEED}: {problems}")


def test_the_unspecified_filter_only_removes_unspecified_parts() -> None:
    """The write filter changes nothing on a call without double stores or stored seeds."""
    rng = random.Random(SEED)
    for _ in range(20):
        call = GENERATORS[Op.WRITE](rng, hostile=True)
        tokens, rows = unspecified_parts(call.make("cpu"))
        filtered = without_unspecified(call)
        if not tokens and not rows:
            assert filtered is call
        else:
            kw = filtered.make("cpu")
            assert unspecified_parts(kw) == ([], []), f"KVCANARY_TEST_SEED={SEED}"
            assert all(int(kw["out_cache_loc"][i]) == -1 for i in tokens)
            assert torch.equal(kw["input_ids"], call.make("cpu")["input_ids"])

"""Fresh random scenarios every run: triton on the device under test against torch_ref on the CPU.

Realistic and hostile inputs from ``tools.scenarios`` (out-of-range slots, predecessors, LUT
entries and rows, negative counts, enable 0 or 2, offsets past the token arrays, a full ring), plus the two
plan stages alone. The seed comes from the clock, or from ``KVCANARY_TEST_SEED`` to replay a failure; a
failing case prints it. Writes drop what torch_ref leaves unspecified for a parallel backend first
(``kvcanary.testing.parity.without_unspecified``). On the CPU the interpreter is slow, so each run draws a few
small cases.
"""

from __future__ import annotations

import os
import random
import time
import zlib

import pytest
import torch

from kvcanary.registry import Op
from kvcanary.testing.parity import unspecified_parts, without_unspecified
from tests.backends.triton._support import device
from tools.scenarios import GENERATORS, fuzz

DEV = device()
SEED = int(os.environ.get("KVCANARY_TEST_SEED", time.time_ns() % 2**32))
# cases per (operation, hostility) and run: the interpreter runs at a few ms per serial write step
CASES = 25 if DEV.type == "cuda" else 8


@pytest.mark.parametrize("hostile", [False, True], ids=["realistic", "hostile"])
@pytest.mark.parametrize("op", list(GENERATORS), ids=lambda o: o.value)
def test_random_parity(op: Op, hostile: bool) -> None:
    failures = fuzz(op, DEV, "triton", seed=SEED ^ zlib.crc32(f"{op.value}/{hostile}".encode()), count=CASES,
                    hostile=hostile)
    assert not failures, f"replay with KVCANARY_TEST_SEED={SEED}: " + "\n".join(failures)


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

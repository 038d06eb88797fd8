"""An engine-like step loop (plan → HEAD verify/write → TAIL verify/write) run by triton and by torch_ref.

On the CPU this runs a few steps through the interpreter; the GPU tests replay the same loop from a CUDA
graph (``test_gpu.py``).
"""

from __future__ import annotations

import os
import time

from tests.backends.triton._engine import Engine, compare_states
from tests.backends.triton._support import device

DEV = device()
SEED = int(os.environ.get("KVCANARY_TEST_SEED", time.time_ns() % 2**32))


def test_engine_steps_match_torch_ref() -> None:
    steps = 40 if DEV.type == "cuda" else 6
    tri = Engine(DEV, seed=SEED, bs=4, num_tokens=24, max_seq=40, num_slots=256)
    ref = Engine("cpu", seed=SEED, bs=4, num_tokens=24, max_seq=40, num_slots=256)
    for step in range(steps):
        tri.prepare()
        ref.prepare()
        tri.step("triton")
        ref.step("torch_ref")
        problems = compare_states(tri.state(), ref.state())
        assert not problems, f"step {step} (KVCANARY_TEST_SEED={SEED}): {problems}"

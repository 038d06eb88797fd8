"""Hostile device values on a GPU: the compiled Triton and CUDA kernels agree with torch_ref (on the CPU) byte for
byte and never write outside their tensors (the recipes of ``tests/backends/_hostile.py``).

Skips without a CUDA device. Meant to run under compute-sanitizer as well, with torch's caching allocator off
so that an access past a guard buffer is outside any allocation (the guards catch the nearer ones)::

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 3 \\
        python -m pytest -q tests/backends/test_hostile_gpu.py

``KVCANARY_HOSTILE_EXAMPLES`` sets the examples per operation and backend (default 40).
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import kvcanary as kc
from kvcanary.registry import Op
from tests.backends import _hostile as h

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

EXAMPLES = int(os.environ.get("KVCANARY_HOSTILE_EXAMPLES", "40"))
BACKENDS = ["triton", "cuda"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", list(h.RECIPES), ids=lambda o: o.value)
def test_hostile_values_on_the_gpu(op: Op, backend: str) -> None:
    if backend not in kc.registered_backends():
        pytest.skip(f"backend {backend} is not registered here")

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(h.RECIPES[op]())
    def one(recipe: h.Recipe) -> None:
        problems = h.compare(recipe, "cuda", backend)
        torch.cuda.synchronize()
        assert not problems, f"{recipe.label} on {backend}: " + "; ".join(problems)

    one()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_fuzzers_plan_on_the_gpu(backend: str) -> None:
    """``prefix_lens=[INT64_MAX, INT64_MAX, 3]``, ``verify_capacity=4``: an illegal memory access before the
    saturating sums; now the plan overflows (enable = 0) on the GPU as on the CPU."""
    from kvcanary.testing import calls

    kw = calls.plan(bs=3, device="cuda")
    kw["verify_plan_out"] = kc.VerifyPlan.allocate(verify_capacity=4, device="cuda")
    kw["verify_capacity"] = 4
    kw["req_pool_indices"] = torch.tensor([1, 2, 3], device="cuda")
    kw["prefix_lens"] = torch.tensor([h.I64_MAX, h.I64_MAX, 3], device="cuda")
    kc.launch_canary_plan_kernels(**kw, backend=backend)
    torch.cuda.synchronize()
    vp = kw["verify_plan_out"]
    assert (int(vp.enable[0]), int(vp.verify_num_valid[0])) == (0, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_window_start_near_int64_min_does_not_wrap_on_the_gpu(backend: str) -> None:
    """``prefix_lens=[INT64_MIN]`` with ``swa_window_size=1``: its window start is 0 and it verifies nothing.
    Written as ``prefix > window ? prefix - window : 0`` in signed C++, nvcc may fold the test into
    ``max(prefix - window, 0)`` (no signed overflow is assumed), which wraps: the CUDA plan then counted one
    entry and overflowed a plan of capacity 0 (the host emulation, built by g++, did not show it)."""
    draw = h.PlanDraw(rpi=[1, 0], prefix=[h.I64_MIN, 0], extend=[0, 0], r2t=torch.zeros(2, 1, dtype=torch.int32),
                      swa=1, lut=[0], pool=None, valid=None, offset=0, cap=0, wcap=2, init=[0] * 5, scratch=False)

    def build(g: h.Guarded) -> h.Kwargs:
        return {"verify_plan_out": draw.verify_plan(g), "write_plan_out": draw.write_plan(g), **draw.inputs(g),
                "extend_seq_lens": g("extend_seq_lens", draw.extend), "verify_capacity": 0, **draw.pool_inputs(g)}

    recipe = h.Recipe(Op.PLAN, build, h._plan_outputs, label="plan INT64_MIN prefix, window 1")
    assert h.compare(recipe, "cuda", backend) == []

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

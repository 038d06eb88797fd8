"""The Triton plan's row scan, both ways: lengths clamped at ``capacity + 1`` (the default) and the saturated
limb sums (taken only where clamped sums could pass INT64_MAX), each byte-equal to torch_ref on hostile
batches and leaving every byte outside the outputs untouched.

No real plan takes the limb path (its capacity would be near ``2**63 / plan_chunk`` entries), so it is forced
here by replacing the host's choice (``plan.limb_sums``); the Launcher keys compiled kernels by their
constexprs, so each path is its own kernel.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from kvcanary.registry import Op
from kvcanary_backends.triton import plan as triton_plan
from tests.backends import _hostile as h
from tests.backends.triton._support import device

M = h.I64_MAX
SETTINGS = settings(max_examples=10, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_only_a_capacity_near_int64_max_over_the_chunk_takes_the_limb_sums() -> None:
    chunk = 256
    edge = M // (chunk + 1) - 1  # (chunk + 1) * (edge + 1) <= INT64_MAX < (chunk + 1) * (edge + 2)
    assert not triton_plan.limb_sums(edge, chunk)
    assert triton_plan.limb_sums(edge + 1, chunk)
    assert not triton_plan.limb_sums(1 << 40, chunk)
    assert triton_plan.limb_sums(M, 1)


def _recipe(prefix: list[int], cap: int, swa: int = 0) -> h.Recipe:
    bs = len(prefix)
    draw = h.PlanDraw(rpi=list(range(1, bs + 1)), prefix=prefix, extend=[1] * bs,
                      r2t=torch.arange(5 * 6, dtype=torch.int32).view(5, 6), swa=swa,
                      lut=[3, 1, 4, 1, 5] if swa else None, pool=None, valid=None, offset=0, cap=cap, wcap=bs,
                      init=list(range(4 * cap + 2 * bs + 1)), scratch=False)

    def build(g: h.Guarded) -> h.Kwargs:
        return {"verify_plan_out": draw.verify_plan(g), "write_plan_out": draw.write_plan(g), **draw.inputs(g),
                "extend_seq_lens": g("extend_seq_lens", [1] * bs), "verify_capacity": cap, **draw.pool_inputs(g)}

    return h.Recipe(Op.PLAN, build, h._plan_outputs, label=f"plan prefix={prefix} cap={cap} swa={swa}")


@pytest.fixture(params=[False, True], ids=["clamped", "limbs"])
def limbs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    forced: bool = request.param
    monkeypatch.setattr(triton_plan, "limb_sums", lambda capacity, chunk: forced)
    return forced


@pytest.mark.parametrize(("prefix", "cap"), [
    ([4, 4], 8),  # exactly the capacity: every entry written
    ([5, 4], 8),  # one past it: overflow, nothing written
    ([9], 8),  # one row alone one past the capacity (clamped to capacity + 1: still an overflow)
    ([0, 8, 0], 8),  # one row of the whole capacity between empty rows
    ([M, 1], 8),  # a length at INT64_MAX (clamped; the limbs saturate)
    ([M, M, 3], 4),  # a total that would wrap to 1
    ([2, 3, 1, 0, 2], 8),  # several rows, several chunks under the interpreter's tuning
    ([3, 3, 3, 0, 0], 8),  # one past the capacity only with the last active row
])
def test_each_scan_plans_what_torch_ref_plans(prefix: list[int], cap: int, limbs: bool) -> None:
    for swa in (0, 2):
        recipe = _recipe(prefix, cap, swa)
        problems = h.compare(recipe, device(), "triton")
        assert not problems, f"{recipe.label} ({'limbs' if limbs else 'clamped'}): " + "; ".join(problems)


def test_each_scan_agrees_on_drawn_hostile_plans(limbs: bool) -> None:
    @SETTINGS
    @given(h.plan_recipes())
    def one(recipe: h.Recipe) -> None:
        problems = h.compare(recipe, device(), "triton")
        assert not problems, f"{recipe.label} ({'limbs' if limbs else 'clamped'}): " + "; ".join(problems)

    one()

"""The Triton plan's token-pool candidates (``TUNING``'s ``plan_pool_*`` keys), each forced on: byte-equal to
torch_ref on plans with the token pool, and leaving every byte outside the outputs untouched.

The candidates change only the code the token-pool specialization compiles to (a capacity test that cannot
fail, the tokens gathered after the other stores, a register cap), never a result; the host passes them to the
pool specialization alone, so a plan without the pool compiles and launches exactly as before (its own register
cap, ``plan_max_registers``, stays its own). The register cap is a compile option the interpreter ignores;
under it these checks cover the host path that passes it, on a GPU the capped kernels themselves.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvcanary.ops.plan import PlanLaunch
from kvcanary.registry import Op
from kvcanary_backends.triton import _jit as jit
from kvcanary_backends.triton import plan as triton_plan
from tests.backends import _hostile as h
from tests.backends.triton._support import device
from tools import workloads

VARIANTS: dict[str, dict[str, int]] = {
    "no cap mask": {"plan_pool_cap_mask": 0},
    "cap mask": {"plan_pool_cap_mask": 1},
    "token last": {"plan_pool_cap_mask": 0, "plan_pool_token_last": 1},
    "cap mask, token last": {"plan_pool_cap_mask": 1, "plan_pool_token_last": 1},
    "64 registers": {"plan_pool_cap_mask": 0, "plan_pool_max_registers": 64},
}
SETTINGS = settings(max_examples=8, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(params=list(VARIANTS))
def variant(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    name: str = request.param
    for key, value in VARIANTS[name].items():
        assert key in jit.TUNING, key
        monkeypatch.setitem(jit.TUNING, key, value)
    return name


def _recipe(prefix: list[int], cap: int, valid: list[int], offset: int, swa: int = 0) -> h.Recipe:
    """Rows 1.. of a 5 x 12 ``req_to_token`` and a 6 x 14 token pool (several tiles a row under the
    interpreter's tuning), every output starting as garbage."""
    bs = len(prefix)
    pool = (torch.arange(6 * 14, dtype=torch.int32) * 7 - 40).view(6, 14)
    draw = h.PlanDraw(rpi=[1 + i % 4 for i in range(bs)], prefix=prefix, extend=[1] * bs,
                      r2t=torch.arange(5 * 12, dtype=torch.int32).view(5, 12), swa=swa,
                      lut=list(range(3, 70)) if swa else None, pool=pool, valid=valid, offset=offset, cap=cap,
                      wcap=bs, init=list(range(4 * cap + 2 * bs + 1)), scratch=True)

    def build(g: h.Guarded) -> h.Kwargs:
        return {"verify_plan_out": draw.verify_plan(g), "write_plan_out": draw.write_plan(g), **draw.inputs(g),
                "extend_seq_lens": g("extend_seq_lens", [1] * bs), "verify_capacity": cap, **draw.pool_inputs(g)}

    return h.Recipe(Op.PLAN, build, h._plan_outputs,
                    label=f"plan prefix={prefix} cap={cap} valid={valid} offset={offset} swa={swa}")


@pytest.mark.parametrize(("prefix", "cap", "valid", "offset"), [
    ([12, 12, 9], 33, [14, 5, 9], 0),  # the whole capacity, several tiles a row, valid lengths cut two rows
    ([11, 0, 12, 7], 40, [14, 14, 3, 0], 1),  # an empty row, room left over, tokens shifted by one
    ([12, 12], 23, [14, 14], 0),  # one past the capacity: nothing written
    ([10, 12, 12], 34, [14, 14, 14], -3),  # negative offset: the first tokens lie before the pool row
])
def test_each_variant_plans_what_torch_ref_plans(variant: str, prefix: list[int], cap: int, valid: list[int],
                                                 offset: int) -> None:
    for swa in (0, 5):
        recipe = _recipe(prefix, cap, valid, offset, swa)
        problems = h.compare(recipe, device(), "triton")
        assert not problems, f"{recipe.label} ({variant}): " + "; ".join(problems)


@st.composite
def _pool_recipes(draw: st.DrawFn) -> h.Recipe:
    """Hostile plans (``_hostile.plan_draws``) that carry the token pool."""
    p = draw(h.plan_draws().filter(lambda d: d.pool is not None))

    def build(g: h.Guarded) -> h.Kwargs:
        return {"verify_plan_out": p.verify_plan(g), "write_plan_out": p.write_plan(g), **p.inputs(g),
                "extend_seq_lens": g("extend_seq_lens", p.extend), "verify_capacity": p.cap, **p.pool_inputs(g)}

    return h.Recipe(Op.PLAN, build, h._plan_outputs, label="plan with the token pool", detail=repr(p))


def test_each_variant_agrees_on_drawn_hostile_plans(variant: str) -> None:
    @SETTINGS
    @given(_pool_recipes())
    def one(recipe: h.Recipe) -> None:
        problems = h.compare(recipe, device(), "triton")
        assert not problems, f"{recipe.label} ({variant}): " + "; ".join(problems)

    one()


def _launch(pool: bool) -> PlanLaunch:
    """A small plan's launch, with or without the token pool (inputs only: nothing is launched)."""
    batch = workloads.PlanBatch(2, 5, device=device(), pools=pool, num_slots=64)
    return PlanLaunch(**batch.kwargs(0, pool=pool))


def test_the_candidates_reach_the_pool_specialization_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    plain, pooled = _launch(False), _launch(True)
    base = triton_plan._launch_args(plain)
    assert triton_plan._launch_args(pooled)[3][-2:] == (True, False)  # the defaults: the capacity mask kept
    assert triton_plan.max_registers(pooled) == 0
    for name, keys in VARIANTS.items():
        with monkeypatch.context() as m:
            for key, value in keys.items():
                m.setitem(jit.TUNING, key, value)
            assert triton_plan._launch_args(plain)[3] == base[3], name  # no pool: the same kernel
            assert triton_plan.max_registers(plain) == 0, name  # the pool's cap is not the plain plan's
            consts = triton_plan._launch_args(pooled)[3]
            assert consts[-2:] == (bool(keys.get("plan_pool_cap_mask")), bool(keys.get("plan_pool_token_last"))), name
            assert triton_plan.max_registers(pooled) == keys.get("plan_pool_max_registers", 0), name
    monkeypatch.setitem(jit.TUNING, "plan_max_registers", 72)  # and the plain plan's cap is not the pool's
    assert triton_plan.max_registers(plain) == 72 and triton_plan.max_registers(pooled) == 0
    assert triton_plan._launch_args(plain)[3] == base[3]

"""``torch.compile`` on a GPU, with both GPU backends: ``opcheck`` over golden and random calls, the compiled step
against eager, and 100 steps under ``mode="reduce-overhead"`` (CUDA graphs through the compiler)."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from torch._dynamo.utils import counters

import kvcanary as kc
from kvcanary.registry import REGISTRY, Op
from kvcanary.testing.opcheck import op_of, opcheck
from kvcanary.testing.parity import ring_rows
from tests.golden import loader as g
from tools.scenarios import GENERATORS, opcheck_random
from tools.step_world import StepWorld, canary_step

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

DEV = torch.device("cuda")
GOLDEN = [c for f in ("verify_cases", "write_cases", "plan_cases", "scatter_cases") for c in g.load(f)]


def _backends() -> list[str]:
    out = []
    for name in ("triton", "cuda"):
        b = REGISTRY.backends().get(name)
        if b is not None and not b.static_reasons(Op.WRITE, DEV):
            out.append(name)
    return out


BACKENDS = _backends() if torch.cuda.is_available() else ["triton", "cuda"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_opcheck_golden_gpu(backend: str) -> None:
    for case in GOLDEN:
        launcher, kwargs = g.launch_args(case, DEV)
        opcheck(op_of(launcher), kwargs, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", list(GENERATORS), ids=[o.value for o in GENERATORS])  # fold: tests/distributed
def test_opcheck_random_gpu(op: Op, backend: str) -> None:
    opcheck_random(op, DEV, backend, count=3)


def _compare(eager: StepWorld, compiled: StepWorld, step: int, base: int) -> int:
    """Every buffer equal; the rows this step appended equal as a multiset (a GPU appends them in any order).
    Returns the write index after the step."""
    torch.cuda.synchronize()
    for name, want in eager.buffers().items():
        if name != "violation_ring":
            assert torch.equal(compiled.buffers()[name], want), f"step {step}: {name} differs"
    total = int(eager.log.violation_write_index[0])
    kept = min(total, eager.log.violation_ring.shape[0])
    assert ring_rows(compiled.log.violation_ring, base, kept) == ring_rows(eager.log.violation_ring, base, kept), step
    return kept


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_steps_match_eager_gpu(backend: str, mode: str) -> None:
    """100 steps (fault mid-way) with changing batch sizes: compiled and eager buffers identical after each."""
    torch._dynamo.reset()
    counters.clear()
    eager = StepWorld.create(DEV, rows=16, max_len=64)
    compiled = StepWorld.create(DEV, rows=16, max_len=64)
    if mode == "reduce-overhead":
        compiled.mark_static()
    step = torch.compile(canary_step, mode=mode, fullgraph=True, dynamic=True)
    rng_e, rng_c = random.Random(11), random.Random(11)
    sizes = [8, 8, 12, 3, 8, 16, 5]
    base = 0
    for i in range(100):
        bs = sizes[i % len(sizes)]
        xe, xc = eager.inputs(rng_e, bs=bs), compiled.inputs(rng_c, bs=bs)
        if i == 50:
            for w in (eager, compiled):
                w.kv[int(w.req_to_token[int(xe.req_pool_indices[0]), 0]), 0] ^= 0x33
        canary_step(eager, xe, backend)
        step(compiled, xc, backend)
        base = _compare(eager, compiled, i, base)
    assert int(eager.log.violation_write_index[0]) > 0
    assert sum(counters["graph_break"].values()) == 0
    if mode == "reduce-overhead":
        assert not counters["inductor"].get("cudagraph_skips"), dict(counters["inductor"])


def test_contract_error_under_compile_gpu() -> None:
    world = StepWorld.create(DEV, rows=4, max_len=8)
    x = world.inputs(random.Random(0), bs=2)
    bad = dataclasses.replace(x, input_ids=x.input_ids.to(torch.int32))  # int32 token ids: the contract wants int64
    with pytest.raises(kc.ContractError) as eager:
        canary_step(world, bad)
    torch._dynamo.reset()
    with pytest.raises(kc.ContractError) as traced:
        torch.compile(canary_step, dynamic=True)(world, bad)
    assert traced.value.code == eager.value.code

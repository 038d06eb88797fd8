"""``torch.compile``: the operators pass ``opcheck``, a compiled step matches eager byte for byte with no graph
break, and a bad call still fails with its contract's code while being traced.

On the CPU the operators run torch_ref and Triton (through its interpreter); ``tests/kvcanary/test_compile_gpu.py``
repeats the step on a GPU with both GPU backends and CUDA graphs.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from torch._dynamo.utils import counters

import kvcanary as kc
from kvcanary.manager import CanaryBatch
from kvcanary.registry import Op
from kvcanary.testing.opcheck import op_of, opcheck
from tests.golden import loader as g
from tools.scenarios import GENERATORS, opcheck_random
from tools.step_world import StepWorld, batch_tensors, canary_step

GOLDEN = [c for f in ("verify_cases", "write_cases", "plan_cases", "scatter_cases") for c in g.load(f)]
CPU_BACKENDS = ("torch_ref", "triton")


def test_schema_is_derived_from_the_contract() -> None:
    """Every field's tensors and scalars appear once, in field order; exactly the written tensors are mutable."""
    CONTRACTS = {o: o.contract for o in Op}

    for op, operator in kc.operators().items():
        contract = CONTRACTS[op]
        schema = operator.op._schema
        names = [a.name for a in schema.arguments]
        assert names[-1] == "backend" and str(schema.arguments[-1].type) == "Optional[str]"
        fields = list(contract.model_fields)
        firsts = [n.split("__")[0] for n in names[:-1]]
        assert sorted(set(firsts), key=firsts.index) == fields, (op, names)
        mutated = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
        written = {w.replace(".", "__") for w in contract.contract.writes}
        assert mutated == {n for n in names if n in written or any(n.endswith("__" + w) for w in written)}, op
        assert mutated, op  # every operation writes something


@pytest.mark.parametrize("op", list(GENERATORS), ids=[o.value for o in GENERATORS])  # fold: tests/distributed
def test_flatten_then_rebuild_is_the_call(op: Op) -> None:
    """The operator carries a call whole: rebuilding its arguments gives back the same tensors and values."""
    kwargs = GENERATORS[op](random.Random(7)).make("cpu")
    operator = kc.operators()[op]
    rebuilt = operator.rebuild(*operator.flatten(**kwargs))
    assert all(a is b or a == b for a, b in zip(operator.flatten(**rebuilt), operator.flatten(**kwargs), strict=True))
    for name, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            assert rebuilt[name] is value
        elif value is None or isinstance(value, (int, bool)):
            assert rebuilt[name] == value
        else:
            assert type(rebuilt[name]) is type(value)


GOLDEN_RUNS = [("torch_ref", c) for c in GOLDEN] + [("triton", c) for c in GOLDEN]


@pytest.mark.parametrize(("backend", "case"), GOLDEN_RUNS, ids=[f"{b}-{c.name}" for b, c in GOLDEN_RUNS])
def test_opcheck_golden(case: g.Case, backend: str) -> None:
    launcher, kwargs = g.launch_args(case)
    opcheck(op_of(launcher), kwargs, backend)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("op", list(GENERATORS), ids=[o.value for o in GENERATORS])  # fold: tests/distributed
def test_opcheck_random_valid_calls(op: Op, backend: str) -> None:
    opcheck_random(op, "cpu", backend, count=2)


# -- compiled steps -------------------------------------------------------------------------------------------


def _run_steps(backend: str, steps: int, batch_sizes: list[int], *, fullgraph: bool = True) -> tuple[int, int]:
    """``steps`` steps eager on one world and compiled on an identical one; buffers compared after each.

    Returns (frames compiled, graph breaks)."""
    torch._dynamo.reset()
    counters.clear()
    eager, compiled = StepWorld.create("cpu", rows=8, max_len=24), StepWorld.create("cpu", rows=8, max_len=24)
    step = torch.compile(canary_step, fullgraph=fullgraph, dynamic=True)
    rng_e, rng_c = random.Random(3), random.Random(3)
    for i in range(steps):
        bs = batch_sizes[i % len(batch_sizes)]
        xe, xc = eager.inputs(rng_e, bs=bs), compiled.inputs(rng_c, bs=bs)
        for t in batch_tensors(xc):
            torch._dynamo.mark_dynamic(t, 0)
        if i == steps // 2:  # a stray write into a live slot's K bytes: both runs must report it alike
            for w in (eager, compiled):
                w.kv[int(w.req_to_token[xe.req_pool_indices[0], 0]), 0] ^= 0x5A
        canary_step(eager, xe, backend)
        step(compiled, xc, backend)
        for name, want in eager.buffers().items():
            assert torch.equal(compiled.buffers()[name], want), f"step {i} (bs {bs}): {name} differs"
    assert int(eager.log.violation_write_index[0]) > 0  # the fault was reported, in both
    frames = int(counters["stats"]["unique_graphs"])
    breaks = sum(counters["graph_break"].values())
    return frames, breaks


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_compiled_step_matches_eager(backend: str) -> None:
    """plan -> HEAD verify -> write -> forward -> TAIL verify under ``fullgraph=True``: identical canary buffers,
    rings and counters; one graph for every batch size of 2 or more, one more for a batch of 1."""
    frames, breaks = _run_steps(backend, steps=8, batch_sizes=[3, 5, 2, 7, 1, 4])
    assert breaks == 0
    assert 1 <= frames <= 2, f"{frames} graphs for 6 batch sizes (expected one for bs >= 2, one for bs == 1)"


def _bad_write(world: StepWorld, x: CanaryBatch) -> None:
    kc.launch_canary_write_kernel(
        context=world.head, plan=world.write_plan, input_ids=x.input_ids.to(torch.int32), positions=x.positions,
        out_cache_loc=x.out_cache_loc, enable_write_input_assert=False, expected_input_tokens=None,
        expected_input_positions=None)


def test_contract_error_under_compile_is_the_launchers() -> None:
    """Traced checks raise the launcher's own ContractError (default mode), or carry its text and code
    (``fullgraph=True``, where any exception is reported as an unsupported construct); nothing changes."""
    world = StepWorld.create("cpu", rows=4, max_len=8)
    x = world.inputs(random.Random(0), bs=2)
    before = [t.clone() for t in world.buffer_tensors()]
    with pytest.raises(kc.ContractError) as eager:
        _bad_write(world, x)
    torch._dynamo.reset()
    with pytest.raises(kc.ContractError) as traced:
        torch.compile(_bad_write, dynamic=True)(world, x)
    assert traced.value.code == eager.value.code and str(traced.value) == str(eager.value)
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported) as full:
        torch.compile(_bad_write, dynamic=True, fullgraph=True)(world, x)
    assert eager.value.code in str(full.value)
    assert all(torch.equal(a, b) for a, b in zip(before, world.buffer_tensors(), strict=True))


def test_operator_called_directly_is_checked_when_traced_and_when_run() -> None:
    """The operator checks its call too: at trace time (fake tensors) and when it runs."""
    world = StepWorld.create("cpu", rows=4, max_len=8)
    x = world.inputs(random.Random(0), bs=2)
    operator = kc.operators()[Op.WRITE]
    kwargs = {"context": world.head, "plan": world.write_plan, "input_ids": x.input_ids.to(torch.int32),
              "positions": x.positions, "out_cache_loc": x.out_cache_loc, "enable_write_input_assert": False,
              "expected_input_tokens": None, "expected_input_positions": None}
    flat = operator.flatten(**kwargs)
    with pytest.raises(kc.ContractError) as direct:
        operator.op(*flat, None)

    def call(*args: Any) -> None:
        operator.op(*args)

    torch._dynamo.reset()
    with pytest.raises(Exception, match=direct.value.code):
        torch.compile(call, fullgraph=True, dynamic=True)(*flat, None)


def test_backend_forced_under_compile_reaches_the_registry() -> None:
    """``backend=`` crosses the operator: an unknown name fails at run time with the registry's error."""
    world = StepWorld.create("cpu", rows=4, max_len=8)
    x = world.inputs(random.Random(0), bs=2)
    torch._dynamo.reset()
    counters.clear()
    with pytest.raises(kc.BackendError, match="no-such-backend"):
        torch.compile(canary_step, fullgraph=True, dynamic=True)(world, x, "no-such-backend")
    assert int(counters["stats"]["unique_graphs"]) == 1  # traced and compiled; the error came at run time


def _direct_write(**change: Any) -> tuple[Any, list[Any], Any]:
    """A valid write's operator, its flat arguments with ``change`` applied (by schema name), and the world."""
    world = StepWorld.create("cpu", rows=4, max_len=8)
    x = world.inputs(random.Random(0), bs=2)
    operator = kc.operators()[Op.WRITE]
    kwargs = {"context": world.head, "plan": world.write_plan, "input_ids": x.input_ids, "positions": x.positions,
              "out_cache_loc": x.out_cache_loc, "enable_write_input_assert": False, "expected_input_tokens": None,
              "expected_input_positions": None}
    flat = operator.flatten(**kwargs)
    names = [a.name for a in operator.op._schema.arguments]
    for name, value in change.items():
        flat[names.index(name)] = value
    return operator, flat, world


@pytest.mark.parametrize(("attr", "value", "rule"), [
    ("read_bytes", 4096, "read_bytes"), ("page_size", 0, "page_size"), ("page_size", -1, "page_size"),
    ("num_bytes_per_token", 8, "num_bytes_per_token")])
def test_operator_called_directly_checks_its_real_kv_sources(attr: str, value: int, rule: str) -> None:
    """Sources rebuilt from an operator's flat arguments are checked as constructing them checks them: a strip
    past its source never reaches a kernel."""
    operator, flat, world = _direct_write()
    names = [a.name for a in operator.op._schema.arguments]
    col = names.index(f"context__real_kv_sources__{attr}")
    if not flat[col]:
        world_sources = kc.RealKvSource(tensor=world.kv, page_size=1, num_bytes_per_token=16, read_bytes=16)
        for a in ("tensor", "page_size", "num_bytes_per_token", "read_bytes"):
            flat[names.index(f"context__real_kv_sources__{a}")] = [getattr(world_sources, a)]
    flat[col] = [value] * len(flat[col])
    before = [t.clone() for t in world.buffer_tensors()]
    with pytest.raises(kc.ContractError, match=rule):
        operator.op(*flat, "torch_ref")
    assert all(torch.equal(a, b) for a, b in zip(before, world.buffer_tensors(), strict=True))


def test_operator_arguments_that_describe_no_call_are_refused() -> None:
    """Collection columns of different lengths, and fields of an absent optional struct, raise naming them."""
    operator, flat, world = _direct_write()
    names = [a.name for a in operator.op._schema.arguments]
    src = kc.RealKvSource(tensor=world.kv, page_size=1, num_bytes_per_token=16, read_bytes=16)
    for a in ("tensor", "page_size", "num_bytes_per_token", "read_bytes"):
        flat[names.index(f"context__real_kv_sources__{a}")] = [getattr(src, a)] * 2
    flat[names.index("context__real_kv_sources__page_size")] = [1, 1, 1]
    with pytest.raises(ValueError, match="one entry per item"):
        operator.op(*flat, "torch_ref")
    operator, flat, _ = _direct_write(extensions__present=False, extensions__write_slot_mismatch=True)
    with pytest.raises(ValueError, match="extensions__present is False"):
        operator.op(*flat, "torch_ref")

"""One declaration per operation: launchers, stubs and every backend follow the operation's contract.

The contract model is the only place an operation's arguments are written. These tests fail when a
launcher, its typed stub or a backend implementation disagrees with it.
"""

from __future__ import annotations

import inspect
import linecache
import typing
from collections.abc import Callable

import pytest
import torch

import kvcanary as kc
from kvcanary.distributed import launch_digest_fold_kernel
from kvcanary.launch.budget import launch_verify_budget_kernel
from kvcanary.registry import REGISTRY, Op
from kvcanary.testing import calls
from kvcanary_backends import priority
from kvcanary_contracts import ContractError
from tools import launcher_stubs as stubs

CONTRACTS = {op: op.contract for op in Op}

LAUNCHERS: dict[Op, Callable[..., None]] = {
    Op.PLAN: kc.launch_canary_plan_kernels,
    Op.PLAN_OFFSETS: kc.launch_plan_offsets_kernel,
    Op.PLAN_ENTRIES: kc.launch_plan_entries_kernel,
    Op.VERIFY: kc.launch_canary_verify_kernel,
    Op.WRITE: kc.launch_canary_write_kernel,
    Op.SCATTER: kc.launch_scatter_req_token_ids_kernel,
    Op.FOLD: launch_digest_fold_kernel,
    Op.VERIFY_BUDGET: launch_verify_budget_kernel,
}


def test_every_operation_has_one_contract_and_one_launcher() -> None:
    assert set(CONTRACTS) == set(Op) == set(LAUNCHERS)
    for op, fn in LAUNCHERS.items():
        assert fn.__kvc_contract__ is CONTRACTS[op]  # type: ignore[attr-defined]


@pytest.mark.parametrize("op", list(Op), ids=lambda o: o.value)
def test_launcher_parameters_are_the_contract_fields(op: Op) -> None:
    params = inspect.signature(LAUNCHERS[op]).parameters
    assert list(params) == [*CONTRACTS[op].model_fields, "backend"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert params["backend"].default is None
    defaults = CONTRACTS[op].none_defaults()  # fields declared default=None (extensions, ...) default to None
    assert all(p.default is (None if n in defaults else inspect.Parameter.empty)
               for n, p in params.items() if n != "backend")


def test_every_backend_implementation_takes_exactly_its_operations_contract() -> None:
    seen = 0
    for name in priority.PRIORITY:  # the built-in backends (tests register doubles of their own)
        backend = REGISTRY.get(name)
        backend.load_kernels()  # also where the backend cannot run here (cuda without a GPU)
        assert backend.load_error is None, backend.load_error
        for op in backend.ops:
            impl = backend.implementation(op)
            params = list(inspect.signature(impl).parameters.values())
            assert len(params) == 1, f"{name} {op.value}: takes {[p.name for p in params]}, wants one call object"
            hint = typing.get_type_hints(impl)[params[0].name]
            assert hint is CONTRACTS[op], f"{name} {op.value}: annotated {hint}, contract is {CONTRACTS[op]}"
            seen += 1
    assert seen == sum(1 for name in priority.PRIORITY for op in Op if priority.devices(name, op))


def test_stubs_are_generated_from_the_contracts() -> None:
    assert stubs.stale() == [], "run `python -m tools.launcher_stubs` and commit the stubs"


def test_stub_overloads_follow_the_presence_rules() -> None:
    text = stubs.stub_text("write")
    assert text.count("@deprecated(") == 4  # two ways to break each of the two rules
    assert "KVC-W083: expected input tensors are required when enable_write_input_assert=True" in text
    assert "def launch_canary_verify_kernel(*, context: VerifyOrWriteContext" in stubs.stub_text("verify")


def test_implementations_receive_the_call_object_unchanged() -> None:
    backend = kc.Backend("probe", "records its call", {Op.SCATTER: kc.OpSupport("tests.kvcanary.test_operations:_probe",
                                                                                 {"cpu": 10_000})})
    kw = calls.scatter()
    _PROBE.clear()
    kc.register_backend(backend)
    try:
        kc.launch_scatter_req_token_ids_kernel(**kw, backend="probe")
    finally:
        REGISTRY.unregister("probe")
    got = list(_PROBE)
    assert len(got) == 1 and isinstance(got[0], CONTRACTS[Op.SCATTER])
    call = got[0]
    assert all(getattr(call, k) is v for k, v in kw.items())
    assert call.model_fields_set == set(kw)


_PROBE: list[object] = []


def _probe(call: object) -> None:
    _PROBE.append(call)


def test_generated_code_shows_in_tracebacks() -> None:
    kw = calls.scatter()
    kw["pool_out"] = kw["pool_out"].to(torch.int64)
    with pytest.raises(ContractError) as info:
        kc.launch_scatter_req_token_ids_kernel(**kw)
    frames = [f for f in info.traceback if str(f.path).startswith("<launcher") or str(f.path).startswith("<contract")]
    assert {str(f.path) for f in frames} >= {"<launcher launch_scatter_req_token_ids_kernel>",
                                             "<contract launch_scatter_req_token_ids_kernel>"}
    for f in frames:
        assert linecache.getline(str(f.path), f.lineno + 1).strip(), f.path


def test_the_backend_guide_names_each_operations_contract() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "api" / "registry.md").read_text()
    for op, contract in CONTRACTS.items():
        assert f"| `{op.value}` | `{contract.__module__}.{contract.__name__}` |" in text, op


@pytest.mark.parametrize("op", list(Op), ids=lambda o: o.name)
def test_each_operation_declares_its_valid_calls_and_the_tables_read_them(op: Op) -> None:
    """The catalog's examples and the kit's call builder are declared with the operation; the catalog's table
    (``kvcanary.valid_calls.EXAMPLES``) and ``kvcanary.testing.calls`` read them, and both pass the contract."""
    from kvcanary.valid_calls import CONSTRUCTORS, EXAMPLES

    assert op.examples is not None and op.examples.callee == op.contract.contract.name
    assert EXAMPLES[op.contract.contract.name] is op.examples and op.contract.contract.name not in CONSTRUCTORS
    check = op.contract.checker()
    for variant in op.examples.variants:
        check(**variant.build())
    assert op.call_builder is not None and getattr(calls, op.constant.lower()) is op.call_builder
    kw = op.call("cpu")
    check(**kw)
    assert calls.of(op).keys() == kw.keys() == calls.of(op.name).keys()
    first = next(iter(kw))
    with pytest.raises(ContractError, match=first):  # the call is what the contract checks: break it, it fails
        check(**{**kw, first: "not a valid value"})


def test_an_operation_without_a_call_builder_says_so() -> None:
    declared = Op.SCATTER
    saved = declared.call_builder
    try:
        declared.call_builder = None
        with pytest.raises(LookupError, match="operation 'scatter_req_token_ids' declares no call builder"):
            declared.call()
        with pytest.raises(AttributeError, match="no declared operation with the constant 'SCATTER'"):
            calls.builder("scatter")
    finally:
        declared.call_builder = saved
    assert calls.scatter is saved


def test_every_operation_has_its_random_scenarios() -> None:
    """Each operation's random parity scenarios are registered beside their generator (``@scenario(op)``), or
    named as living elsewhere; a new operation without either fails here. Each generator makes its own op."""
    import random

    from tools import scenarios

    assert set(scenarios.GENERATORS) | set(scenarios.ELSEWHERE) == set(Op)
    assert not set(scenarios.GENERATORS) & set(scenarios.ELSEWHERE)
    for op, generate in scenarios.GENERATORS.items():
        assert generate(random.Random(1)).op is op
    with pytest.raises(ValueError, match="already has its random scenarios"):
        scenarios.scenario(Op.VERIFY)(scenarios.verify_call)

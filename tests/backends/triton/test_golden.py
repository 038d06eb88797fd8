"""triton replays every golden vector through the public launchers (``backend="triton"``).

Outputs must equal the vectors byte for byte; the rows one launch appends are compared as a multiset
(``kvcanary.testing.parity``), and cases marked ``ring_order_sensitive`` (a launch that overflows the ring
part-way, where which rows survive depends on their order) compare only the ring's untouched rows and the
write index. On the CPU this runs the kernels through Triton's interpreter; on a GPU, compiled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch

import kvcanary as kc
from kvcanary.testing.parity import compare_outputs
from tests.backends.triton._support import device
from tests.golden import loader as g

DEV = device()
RUNNERS: dict[str, Callable[..., dict[str, torch.Tensor]]] = {
    "verify_cases": g.run_verify, "write_cases": g.run_write, "plan_cases": g.run_plan, "scatter_cases": g.run_scatter,
}
CASES = [(f, c) for f in RUNNERS for c in g.load(f)]


def _base(case: g.Case) -> int | None:
    ctx = case.inputs.get("context")
    return None if ctx is None else int(g.req(ctx["violation_write_index"])[0])


@pytest.mark.parametrize(("file", "case"), CASES, ids=[c.name for _, c in CASES])
def test_case(file: str, case: g.Case) -> None:
    got = RUNNERS[file](case, DEV, "triton")
    problems = compare_outputs(got, g.expected(case), base=_base(case), order_sensitive=case.ring_order_sensitive)
    assert not problems, problems
    if case.kind == "verify":  # verify never writes the canary buffer
        assert torch.equal(got["canary_buf"].cpu(), g.req(case.inputs["context"]["canary_buf"]))


PIPELINES = g.load("pipeline_cases")


@pytest.mark.parametrize("case", PIPELINES, ids=[c.name for c in PIPELINES])
def test_pipeline(case: g.Case) -> None:
    base = 0
    for step, (got, want) in enumerate(zip(g.run_pipeline(case, DEV, "triton"), g.expected_pipeline(case),
                                           strict=True)):
        # a step appends the rows of four launches; as a multiset they are order-free
        problems = compare_outputs(got, want, base=base)
        assert not problems, f"step {step}: {problems}"
        base = int(want["violation_write_index"][0])


ERRORS = [c for f in ("plan_errors_and_quirks", "write_errors_and_quirks", "verify_errors_and_quirks")
          for c in g.load(f) if "error" in c.outputs and "_error_" in c.name]


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for f in dataclasses.fields(value) for t in _tensors(getattr(value, f.name))]
    if isinstance(value, tuple):
        return [t for v in value for t in _tensors(v)]
    return []


@pytest.mark.parametrize("case", ERRORS, ids=[c.name for c in ERRORS])
def test_error_cases_raise_the_contract_error_before_anything_runs(case: g.Case) -> None:
    """The contract layer rejects the call before any backend runs: same message, no tensor changed."""
    launcher, kwargs = g.launch_args(case, DEV)
    tensors = [t for v in kwargs.values() for t in _tensors(v)]
    before = [t.clone() for t in tensors]
    with pytest.raises(kc.ContractError) as info:
        launcher(**kwargs, backend="triton")
    assert str(info.value).splitlines()[0] == case.outputs["error"]["message"]
    assert all(torch.equal(a, b) for a, b in zip(before, tensors, strict=True))


@pytest.mark.parametrize("name", ["write_quirk_num_valid_reqs_beyond_bs_writes_nothing",
                                  "verify_quirk_negative_num_valid_is_noop"])
def test_reference_quirks_kvcanary_keeps(name: str) -> None:
    case = next(c for f in ("write_errors_and_quirks", "verify_errors_and_quirks") for c in g.load(f) if c.name == name)
    got = (g.run_write if case.kind == "write" else g.run_verify)(case, DEV, "triton")
    problems = compare_outputs(got, g.expected(case), base=_base(case))
    assert not problems, problems


def test_swa_slot_beyond_the_lut_plans_what_torch_ref_plans() -> None:
    """Where the SGLang reference raises, kvcanary plans INVALID_SLOT; triton matches torch_ref exactly."""
    case = next(c for c in g.load("plan_errors_and_quirks") if c.name == "plan_quirk_swa_lut_out_of_range_raises")
    got = g.run_plan(case, DEV, "triton")
    want = g.run_plan(case, "cpu", "torch_ref")
    assert not compare_outputs(got, want)
    n = int(want["verify_plan_out.verify_num_valid"][0])
    assert (want["verify_plan_out.verify_slot_indices"][:n] == kc.INVALID_SLOT).any()

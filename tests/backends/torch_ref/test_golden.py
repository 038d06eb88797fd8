"""torch_ref replays every golden vector through the public launchers, byte for byte, rows in order."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import kvcanary as kc
from tests.golden import loader as g

RUNNERS: dict[str, Callable[..., dict[str, torch.Tensor]]] = {
    "verify_cases": g.run_verify, "write_cases": g.run_write, "plan_cases": g.run_plan, "scatter_cases": g.run_scatter,
}
CASES = [(f, c) for f in RUNNERS for c in g.load(f)]


@pytest.mark.parametrize(("file", "case"), CASES, ids=[c.name for _, c in CASES])
def test_case(file: str, case: g.Case) -> None:
    got = RUNNERS[file](case, "cpu", "torch_ref")
    for name, want in g.expected(case).items():
        assert torch.equal(got[name], want), name
    if case.kind == "verify":  # verify never writes the canary buffer
        assert torch.equal(got["canary_buf"], g.req(case.inputs["context"]["canary_buf"]))


PIPELINES = g.load("pipeline_cases")


@pytest.mark.parametrize("case", PIPELINES, ids=[c.name for c in PIPELINES])
def test_pipeline(case: g.Case) -> None:
    for step, (got, want) in enumerate(zip(g.run_pipeline(case, "cpu", "torch_ref"), g.expected_pipeline(case),
                                           strict=True)):
        for name, w in want.items():
            assert torch.equal(got[name], w), f"step {step}: {name}"


ERRORS = [c for f in ("plan_errors_and_quirks", "write_errors_and_quirks", "verify_errors_and_quirks")
          for c in g.load(f) if "error" in c.outputs and "_error_" in c.name]


@pytest.mark.parametrize("case", ERRORS, ids=[c.name for c in ERRORS])
def test_error_cases_raise_first_and_change_nothing(case: g.Case) -> None:
    run = {"plan": g.run_plan, "write": g.run_write, "verify": g.run_verify}[case.kind]
    with pytest.raises(kc.ContractError) as info:
        run(case, "cpu", "torch_ref")
    assert str(info.value).splitlines()[0] == case.outputs["error"]["message"]


def test_error_cases_leave_every_tensor_as_it_was() -> None:
    # the reference bumps counters before some checks; kvcanary validates the whole contract first
    case = next(c for c in ERRORS if c.name == "write_error_slot_stride_too_small")
    ctx = g.context(case.inputs["context"], "cpu")
    before = [t.clone() for t in (ctx.canary_buf, ctx.violation_ring, ctx.violation_write_index,
                                  ctx.slot_run_counter, ctx.kernel_run_counter)]
    i = case.inputs
    with pytest.raises(kc.ContractError):
        kc.launch_canary_write_kernel(
            context=ctx, plan=g.write_plan(i["plan"], "cpu"), input_ids=g.req(i["input_ids"]),
            positions=g.req(i["positions"]), out_cache_loc=g.req(i["out_cache_loc"]),
            enable_write_input_assert=i["enable_write_input_assert"],
            expected_input_tokens=g.tensor(i["expected_input_tokens"]),
            expected_input_positions=g.tensor(i["expected_input_positions"]))
    after = (ctx.canary_buf, ctx.violation_ring, ctx.violation_write_index, ctx.slot_run_counter,
             ctx.kernel_run_counter)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


@pytest.mark.parametrize("name", ["write_quirk_num_valid_reqs_beyond_bs_writes_nothing",
                                  "verify_quirk_negative_num_valid_is_noop"])
def test_reference_quirks_kvcanary_keeps(name: str) -> None:
    case = next(c for f in ("write_errors_and_quirks", "verify_errors_and_quirks") for c in g.load(f) if c.name == name)
    got = (g.run_write if case.kind == "write" else g.run_verify)(case, "cpu", "torch_ref")
    for k, want in g.expected(case).items():
        assert torch.equal(got[k], want), k


def test_swa_slot_beyond_the_lut_plans_invalid_slot_instead_of_raising() -> None:
    """The reference raises (GPU kernels clamp to a wrong, valid slot); kvcanary writes INVALID_SLOT."""
    case = next(c for c in g.load("plan_errors_and_quirks") if c.name == "plan_quirk_swa_lut_out_of_range_raises")
    got = g.run_plan(case, "cpu", "torch_ref")
    i = case.inputs
    lut_len = i["full_to_swa_index_mapping"]["shape"][0]
    r2t = g.req(i["req_to_token"])
    n = int(got["verify_plan_out.verify_num_valid"][0])
    slots = got["verify_plan_out.verify_slot_indices"][:n]
    assert int(got["verify_plan_out.enable"][0]) == 1
    assert (slots == kc.INVALID_SLOT).any(), "the out-of-range slot is marked, not clamped"
    assert int(r2t.max()) >= lut_len
    assert not ((slots >= 0) & (slots >= lut_len)).any()

"""The plan operation: the contract of ``launch_canary_plan_kernels`` and its operation object.

The fused plan: offsets, entries and write metadata.

The capacity and valid-lens messages are the torch reference's texts: they are what the golden vectors
(made by running the reference) record, and kvcanary raises one text on every backend.
"""


from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.errors import FAMILY
from kvcanary.extensions import Extensions
from kvcanary.operation import Operation
from kvcanary.ops import _calls as c
from kvcanary.ops import _plan_inputs as p
from kvcanary.ops._shared import (
    EXTENSIONS,
    EXTENSIONS_DOC,
    VERIFY_PLAN_FIELDS,
    WRITE_PLAN_FIELDS,
    verify_plan_struct,
    write_plan_struct,
)
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary_contracts import Contract, ContractInfo, Relation, ScalarArg, StructArg
from kvcanary_contracts.examples import ExampleSet, Variant

NAME = "launch_canary_plan_kernels"
_VERIFY_OUT: StructArg = verify_plan_struct("verify_plan_out.", "plan_verify_capacity")


class PlanLaunch(Contract):
    """Build the verify plan (the prefix each request reads) and the write plan (what it writes)."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        NAME, "P", "Fill the verify and write plans from the batch and req_to_token.",
        device_key="verify_plan_out.verify_slot_indices",
        writes=(*(f"verify_plan_out.{f}" for f in VERIFY_PLAN_FIELDS),
                *(f"write_plan_out.{f}" for f in WRITE_PLAN_FIELDS)),
        constants=p.CONSTANTS,
        rules=(
            p.swa_requires_lut(NAME),
            p.pool_requires_valid_lens(
                "launch_canary_plan_kernels_torch_reference requires req_to_verify_expected_tokens_valid_lens "
                "when req_to_verify_expected_tokens is set"
            ),
            p.window_non_negative(NAME),
            p.REQ_TO_TOKEN_NOT_EMPTY,
            p.POOL_NOT_EMPTY,
            p.bs_limit(NAME, with_write_plan=True),
            Relation(
                name="verify_capacity_matches_plan",
                require="verify_capacity == plan_verify_capacity",
                message="launch_canary_plan_kernels_torch_reference verify_capacity={verify_capacity} does not "
                "match verify_plan_out.verify_slot_indices.shape[0]={plan_verify_capacity}",
                why="verify_capacity decides overflow (enable = 0); if it differs from the plan's real length the "
                "plan kernels would either overflow early or write past the arrays.",
                fix="Pass verify_capacity=verify_plan_out.verify_slot_indices.shape[0].",
            ),
            p.bs_within_write_capacity("bs={bs} exceeds write_req_capacity={write_req_capacity}"),
        ),
    )

    verify_plan_out: Annotated[VerifyPlan, _VERIFY_OUT] = Field(description="Verify plan to fill (in place).")
    write_plan_out: Annotated[WritePlan, write_plan_struct("write_plan_out.")] = Field(
        description="Write plan to fill (in place).")
    req_pool_indices: Annotated[torch.Tensor, p.REQ_POOL_INDICES] = Field(description=p.DOC["req_pool_indices"])
    prefix_lens: Annotated[torch.Tensor, p.PREFIX_LENS] = Field(description=p.DOC["prefix_lens"])
    extend_seq_lens: Annotated[torch.Tensor, p.EXTEND_SEQ_LENS] = Field(description=p.DOC["extend_seq_lens"])
    req_to_token: Annotated[torch.Tensor, p.REQ_TO_TOKEN] = Field(description=p.DOC["req_to_token"])
    swa_window_size: Annotated[int, ScalarArg(int)] = Field(description=p.DOC["swa_window_size"])
    full_to_swa_index_mapping: Annotated[torch.Tensor | None, p.lut()] = Field(description=p.DOC["lut"])
    verify_capacity: Annotated[int, ScalarArg(int)] = Field(
        description="Must equal verify_plan_out's capacity; more entries than this overflow (enable = 0).")
    req_to_verify_expected_tokens: Annotated[torch.Tensor | None, p.EXPECTED_TOKEN_POOL] = Field(
        description=p.DOC["pool"])
    req_to_verify_expected_tokens_valid_lens: Annotated[torch.Tensor | None, p.VALID_LENS] = Field(
        description=p.DOC["valid_lens"])
    kv_token_id_vs_position_offset: Annotated[int, ScalarArg(int)] = Field(description=p.DOC["offset"])
    extensions: Annotated[Extensions | None, EXTENSIONS] = Field(default=None, description=EXTENSIONS_DOC)


check_plan = PlanLaunch.checker()


def _example(swa: bool = False, pool: bool = False, ext: bool = False) -> c.Call:
    """The catalog's plan: 3 requests over an 8 x 64 req_to_token, into plans of 32 entries and 4 requests."""
    return {
        "verify_plan_out": c.engine_verify_plan(),
        "write_plan_out": c.engine_write_plan(),
        **c.batch(),
        "req_to_token": c.i32(c.MAX_REQS, c.MAX_CONTEXT),
        "swa_window_size": c.SWA_WINDOW if swa else 0,
        "full_to_swa_index_mapping": c.i64(c.NUM_SLOTS + 1) if swa else None,
        "verify_capacity": c.VERIFY_CAPACITY,
        "req_to_verify_expected_tokens": c.i32(c.MAX_REQS, c.MAX_CONTEXT) if pool else None,
        "req_to_verify_expected_tokens_valid_lens": c.i64(c.BS) if pool else None,
        "kv_token_id_vs_position_offset": 0,
        **({"extensions": c.every_extension()} if ext else {}),
    }


EXAMPLES = ExampleSet(NAME, (
    Variant("FULL group", _example),
    Variant("SWA group", lambda: _example(swa=True), "swa_window_size > 0 with the full→SWA table"),
    Variant("token-id pool", lambda: _example(pool=True), "the expected-token pool and its valid lengths"),
    Variant("extensions", lambda: _example(ext=True), "every extension check on"),
))


def valid_call(device: c.Device = "cpu", *, bs: int = 3, swa: int = 0, pool: bool = False) -> c.Call:
    """A small valid plan of ``bs`` requests (a window of ``swa`` with its table; the token pool if ``pool``)."""
    vp = c.verify_plan(device)
    return {
        "verify_plan_out": vp, "write_plan_out": c.write_plan(device), "req_pool_indices": c.i64(bs, device=device),
        "prefix_lens": c.i64(bs, device=device), "extend_seq_lens": c.i64(bs, device=device),
        "req_to_token": c.i32(4, 8, device=device),
        "swa_window_size": swa, "full_to_swa_index_mapping": c.i64(17, device=device) if swa else None,
        "verify_capacity": vp.verify_capacity,
        "req_to_verify_expected_tokens": c.i32(4, 8, device=device) if pool else None,
        "req_to_verify_expected_tokens_valid_lens": c.i64(bs, device=device) if pool else None,
        "kv_token_id_vs_position_offset": 0,
    }

PLAN = OPERATION = Operation(
    "plan", PlanLaunch, constant="PLAN", module="kvcanary.launch.plan",
    doc="""Verify entries for every prefix token ``[window_start, prefix_len)`` of each active row, and the
    write offsets and seeds for the tokens it writes. Overflow sets ``enable = 0`` instead of raising.""",
    examples=EXAMPLES, call=valid_call,
)
launch_canary_plan_kernels = OPERATION.launcher

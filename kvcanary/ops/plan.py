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

PLAN = OPERATION = Operation(
    "plan", PlanLaunch, constant="PLAN", module="kvcanary.launch.plan",
    doc="""Verify entries for every prefix token ``[window_start, prefix_len)`` of each active row, and the
    write offsets and seeds for the tokens it writes. Overflow sets ``enable = 0`` instead of raising.""",
)
launch_canary_plan_kernels = OPERATION.launcher

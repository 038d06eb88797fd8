"""The plan_offsets operation: the contract of ``launch_plan_offsets_kernel`` and its operation object.

Plan stage 1: per-request offsets, seeds, overflow.

Messages are SGLang's ``_validate_offsets_kernel_inputs`` texts, including its name ``lut_tensor`` for
``full_to_swa_index_mapping``.
"""


from typing import Annotated, ClassVar

import torch
from pydantic import Field

from kvcanary.consts import PLAN_OFFSETS_SCRATCH_LEN
from kvcanary.errors import FAMILY
from kvcanary.operation import Operation
from kvcanary.ops import _calls as c
from kvcanary.ops import _plan_inputs as p
from kvcanary_contracts import Contract, ContractInfo, Relation, ScalarArg, TensorArg
from kvcanary_contracts.examples import ExampleSet, Variant

NAME = "launch_plan_offsets_kernel"


class PlanOffsetsLaunch(Contract):
    """Compute verify offsets (into the scratch), write offsets, seeds, num_valid and enable."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        NAME, "O", "Plan stage 1: offsets, write metadata and the overflow decision.",
        device_key="out_verify_offsets_scratch",
        writes=("out_verify_offsets_scratch", "out_write_offsets", "out_write_seed_slot_indices",
                "out_verify_num_valid", "out_verify_enable", "out_write_num_valid_reqs"),
        constants=p.CONSTANTS,
        rules=(
            p.swa_requires_lut(NAME),
            p.window_non_negative(NAME),
            p.REQ_TO_TOKEN_NOT_EMPTY,
            Relation(
                name="bs_in_block",
                require="bs <= PLAN_BS_BLOCK_SIZE",
                message="offsets kernel bs must be in [0, {PLAN_BS_BLOCK_SIZE}], got {bs}",
                why="The offsets kernel scans all rows in one block of PLAN_BS_BLOCK_SIZE.",
                fix="Split the batch into launches of at most PLAN_BS_BLOCK_SIZE rows.",
                breaks={"bs": p.TOO_MANY_ROWS, "write_req_capacity": p.TOO_MANY_ROWS,
                        "write_offsets_len": "PLAN_BS_BLOCK_SIZE + 2"},
            ),
            Relation(
                name="write_offsets_len_positive",
                require="write_offsets_len > 0",
                message="write_offsets_len must be positive, got {write_offsets_len}",
                why="write_offsets always holds at least the total at index bs.",
                fix="Allocate out_write_offsets with write_req_capacity + 1 entries.",
            ),
            Relation(
                name="verify_capacity_non_negative",
                require="verify_capacity >= 0",
                message="verify_capacity must be non-negative, got {verify_capacity}",
                why="verify_capacity is a count of entries.",
                fix="Pass the verify plan's capacity.",
            ),
            Relation(
                name="write_offsets_len_is_capacity_plus_one",
                require="write_offsets_len == write_req_capacity + 1",
                message="write_offsets_len must equal write_req_capacity + 1, got {write_offsets_len} and "
                "{write_req_capacity}",
                why="write_offsets holds one exclusive offset per request row plus the total.",
                fix="Allocate out_write_offsets with out_write_seed_slot_indices.shape[0] + 1 entries.",
            ),
            p.bs_within_write_capacity("bs={bs} exceeds write_req_capacity={write_req_capacity}"),
        ),
    )

    req_pool_indices: Annotated[torch.Tensor, p.REQ_POOL_INDICES] = Field(description=p.DOC["req_pool_indices"])
    prefix_lens: Annotated[torch.Tensor, p.PREFIX_LENS] = Field(description=p.DOC["prefix_lens"])
    extend_seq_lens: Annotated[torch.Tensor, p.EXTEND_SEQ_LENS] = Field(description=p.DOC["extend_seq_lens"])
    req_to_token: Annotated[torch.Tensor, p.REQ_TO_TOKEN] = Field(description=p.DOC["req_to_token"])
    full_to_swa_index_mapping: Annotated[torch.Tensor | None, p.lut("lut_tensor")] = Field(
        description=p.DOC["lut"] + " Messages call it lut_tensor (SGLang's name).")
    out_verify_offsets_scratch: Annotated[
        torch.Tensor, TensorArg(dtype=torch.int64, shape=(f">= {PLAN_OFFSETS_SCRATCH_LEN}",))
    ] = Field(description="Receives each row's exclusive verify offset and the total at [bs].")
    out_write_offsets: Annotated[torch.Tensor, TensorArg(dtype=torch.int64, shape=("write_offsets_len",))] = Field(
        description="Receives the exclusive write offsets [0..bs].")
    out_write_seed_slot_indices: Annotated[
        torch.Tensor, TensorArg(dtype=torch.int64, shape=("write_req_capacity",))
    ] = Field(description="Receives each row's seed slot (-1: anchor).")
    out_verify_num_valid: Annotated[torch.Tensor, TensorArg(dtype=torch.int32, shape=(1,))] = Field(
        description="Receives min(total_verify, verify_capacity).")
    out_verify_enable: Annotated[torch.Tensor, TensorArg(dtype=torch.int32, shape=(1,))] = Field(
        description="Receives 1, or 0 when the verify plan overflows.")
    out_write_num_valid_reqs: Annotated[torch.Tensor, TensorArg(dtype=torch.int32, shape=(1,))] = Field(
        description="Receives bs.")
    swa_window_size: Annotated[int, ScalarArg(int)] = Field(description=p.DOC["swa_window_size"])
    verify_capacity: Annotated[int, ScalarArg(int)] = Field(description="Overflow threshold.")


check_plan_offsets = PlanOffsetsLaunch.checker()


def _example(swa: bool = False) -> c.Call:
    """The catalog's stage 1: 3 requests, a write plan of 4 requests and a verify capacity of 32."""
    return {
        **c.batch(),
        "req_to_token": c.i32(c.MAX_REQS, c.MAX_CONTEXT),
        "full_to_swa_index_mapping": c.i64(c.NUM_SLOTS + 1) if swa else None,
        "out_verify_offsets_scratch": c.i64(PLAN_OFFSETS_SCRATCH_LEN),
        "out_write_offsets": c.i64(c.WRITE_REQ_CAPACITY + 1),
        "out_write_seed_slot_indices": c.i64(c.WRITE_REQ_CAPACITY),
        "out_verify_num_valid": c.i32(1),
        "out_verify_enable": c.i32(1),
        "out_write_num_valid_reqs": c.i32(1),
        "swa_window_size": c.SWA_WINDOW if swa else 0,
        "verify_capacity": c.VERIFY_CAPACITY,
    }


EXAMPLES = ExampleSet(NAME, (
    Variant("FULL group", _example),
    Variant("SWA group", lambda: _example(swa=True)),
))


def valid_call(device: c.Device = "cpu", *, bs: int = 3, cap: int = 4) -> c.Call:
    """A small valid stage 1 of ``bs`` requests into a write plan of ``cap`` requests."""
    return {
        "req_pool_indices": c.i64(bs, device=device), "prefix_lens": c.i64(bs, device=device),
        "extend_seq_lens": c.i64(bs, device=device), "req_to_token": c.i32(4, 8, device=device),
        "full_to_swa_index_mapping": None, "out_verify_offsets_scratch": c.i64(PLAN_OFFSETS_SCRATCH_LEN, device=device),
        "out_write_offsets": c.i64(cap + 1, device=device), "out_write_seed_slot_indices": c.i64(cap, device=device),
        "out_verify_num_valid": c.i32(1, device=device), "out_verify_enable": c.i32(1, device=device),
        "out_write_num_valid_reqs": c.i32(1, device=device), "swa_window_size": 0, "verify_capacity": 8,
    }

PLAN_OFFSETS = OPERATION = Operation(
    "plan_offsets", PlanOffsetsLaunch, constant="PLAN_OFFSETS", module="kvcanary.launch.plan_offsets",
    doc="""Write each row's exclusive verify offset (total at ``[bs]``), the write offsets ``[0..bs]``, the
    seeds ``[0, bs)``, ``num_valid``, ``enable`` and ``num_valid_reqs``. Entries past bs are untouched.""",
    examples=EXAMPLES, call=valid_call,
)
launch_plan_offsets_kernel = OPERATION.launcher

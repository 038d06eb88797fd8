"""Contracts of the allocators: capacities must be positive (SGLang's messages)."""


from typing import Annotated, ClassVar

from pydantic import Field

from kvcanary.contracts import Contract, ContractInfo, Relation, ScalarArg
from kvcanary.errors import FAMILY

_FIX = "Size it from the engine's capacities (see `CanaryCapacities`); it must hold at least one entry."


class VerifyPlanAllocate(Contract):
    """``VerifyPlan.allocate(verify_capacity=..., device=...)``."""

    contract: ClassVar[ContractInfo] = ContractInfo(
        name="VerifyPlan.allocate",
        family=FAMILY,
        letter="A",
        summary="Allocate a verify plan able to hold verify_capacity entries.",
        rules=(
            Relation(
                name="verify_capacity_positive",
                require="verify_capacity > 0",
                message="VerifyPlan verify_capacity must be positive, got {verify_capacity}",
                why="A plan with no room cannot describe any verify entry; the plan kernel would always overflow.",
                fix=_FIX,
            ),
        ),
    )
    verify_capacity: Annotated[int, ScalarArg(int)] = Field(description="Entries the plan can hold.")


class WritePlanAllocate(Contract):
    """``WritePlan.allocate(write_req_capacity=..., device=...)``."""

    contract: ClassVar[ContractInfo] = ContractInfo(
        name="WritePlan.allocate",
        family=FAMILY,
        letter="A",
        summary="Allocate a write plan able to describe write_req_capacity request rows.",
        rules=(
            Relation(
                name="write_req_capacity_positive",
                require="write_req_capacity > 0",
                message="WritePlan write_req_capacity must be positive, got {write_req_capacity}",
                why="A write plan with no rows cannot describe any request.",
                fix=_FIX,
            ),
        ),
    )
    write_req_capacity: Annotated[int, ScalarArg(int)] = Field(description="Request rows the plan can hold.")


class ViolationLogAllocate(Contract):
    """``ViolationLog.allocate(ring_capacity=..., device=...)``."""

    contract: ClassVar[ContractInfo] = ContractInfo(
        name="ViolationLog.allocate",
        family=FAMILY,
        letter="A",
        summary="Allocate the device-side violation ring and its write index.",
        rules=(
            Relation(
                name="ring_capacity_positive",
                require="ring_capacity > 0",
                message="ViolationLog ring_capacity must be positive, got {ring_capacity}",
                why="The ring keeps the first ring_capacity violations; with no rows nothing could be reported.",
                fix="Use the default (1024, or SGLANG_KV_CANARY_RING_CAPACITY) or any positive size.",
            ),
        ),
    )
    ring_capacity: Annotated[int, ScalarArg(int)] = Field(description="Rows of the violation ring.")


check_verify_plan_allocate = VerifyPlanAllocate.checker()
check_write_plan_allocate = WritePlanAllocate.checker()
check_violation_log_allocate = ViolationLogAllocate.checker()

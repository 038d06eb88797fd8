"""The verify operation: the contract of ``launch_canary_verify_kernel`` and its operation object."""


from typing import Annotated, ClassVar

from pydantic import Field

from kvcanary.context import VerifyOrWriteContext
from kvcanary.errors import FAMILY
from kvcanary.extensions import Extensions
from kvcanary.operation import Operation
from kvcanary.ops._shared import CONTEXT, EXTENSIONS, EXTENSIONS_DOC, VERIFY_WRITES, verify_plan_struct
from kvcanary.plans import VerifyPlan
from kvcanary_contracts import Contract, ContractInfo, ScalarArg


class VerifyLaunch(Contract):
    """Re-verify the plan's slots: chain link, position, optional token and real-KV fingerprint."""

    contract: ClassVar[ContractInfo] = FAMILY.contract(
        "launch_canary_verify_kernel", "V",
        "Verify the slots a forward is about to read; mismatches go to the violation ring.",
        device_key="canary_buf",
        writes=VERIFY_WRITES,
    )

    context: Annotated[VerifyOrWriteContext, CONTEXT] = Field(description="The endpoint's buffers.")
    plan: Annotated[VerifyPlan, verify_plan_struct("plan.")] = Field(description="What to verify.")
    check_verify_expected_token: Annotated[bool, ScalarArg(bool)] = Field(
        description="Compare stored tokens with plan.verify_expected_tokens (entries of -1 are skipped).")
    extensions: Annotated[Extensions | None, EXTENSIONS] = Field(default=None, description=EXTENSIONS_DOC)


check_verify = VerifyLaunch.checker()

VERIFY = OPERATION = Operation(
    "verify", VerifyLaunch, constant="VERIFY", module="kvcanary.launch.verify",
    doc="""Verify ``plan``'s entries against ``context.canary_buf``; violations go to the ring.

    Never raises because of device data: bad indices are recorded as INDEX_OUT_OF_RANGE violations.
    Raises :class:`~contracts.ContractError` (a ValueError) for a bad call, before anything runs.""",
)
launch_canary_verify_kernel = OPERATION.launcher

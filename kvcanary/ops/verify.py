"""The verify operation: the contract of ``launch_canary_verify_kernel`` and its operation object."""


from typing import Annotated, ClassVar

from pydantic import Field

from kvcanary.context import VerifyOrWriteContext
from kvcanary.errors import FAMILY
from kvcanary.extensions import Extensions
from kvcanary.operation import Operation
from kvcanary.ops import _calls as c
from kvcanary.ops._shared import CONTEXT, EXTENSIONS, EXTENSIONS_DOC, VERIFY_WRITES, verify_plan_struct
from kvcanary.plans import VerifyPlan
from kvcanary_contracts import Contract, ContractInfo, ScalarArg
from kvcanary_contracts.examples import ExampleSet, Variant


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


def _example(ext: bool = False) -> c.Call:
    """The catalog's verify: the engine-shaped context and a plan of 32 entries."""
    return {"context": c.engine_context(), "plan": c.engine_verify_plan(), "check_verify_expected_token": True,
            **({"extensions": c.every_extension()} if ext else {})}


EXAMPLES = ExampleSet("launch_canary_verify_kernel", (
    Variant("TAIL K, FULL", _example),
    Variant("extensions", lambda: _example(ext=True), "every extension check on"),
))


def valid_call(device: c.Device = "cpu") -> c.Call:
    """A small valid verify: a zero context and a plan of 8 entries, the token check off."""
    return {"context": c.context(device), "plan": c.verify_plan(device), "check_verify_expected_token": False}

VERIFY = OPERATION = Operation(
    "verify", VerifyLaunch, constant="VERIFY", module="kvcanary.launch.verify",
    doc="""Verify ``plan``'s entries against ``context.canary_buf``; violations go to the ring.

    Never raises because of device data: bad indices are recorded as INDEX_OUT_OF_RANGE violations.
    Raises :class:`~contracts.ContractError` (a ValueError) for a bad call, before anything runs.""",
    examples=EXAMPLES, call=valid_call,
)
launch_canary_verify_kernel = OPERATION.launcher

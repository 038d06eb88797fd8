# Generated from the contracts by `python -m kvcanary.launch`; do not edit (a test fails when it drifts).
"""``launch_canary_verify_kernel``: re-verify the slots a forward is about to read."""

from kvcanary.context import VerifyOrWriteContext
from kvcanary.extensions import Extensions
from kvcanary.plans import VerifyPlan

def launch_canary_verify_kernel(*, context: VerifyOrWriteContext, plan: VerifyPlan, check_verify_expected_token: bool, extensions: Extensions | None = None, backend: str | None = None) -> None:
    """Verify ``plan``'s entries against ``context.canary_buf``; violations go to the ring.

    Never raises because of device data: bad indices are recorded as INDEX_OUT_OF_RANGE violations.
    Raises :class:`~contracts.ContractError` (a ValueError) for a bad call, before anything runs."""

"""``launch_canary_verify_kernel``: re-verify the slots a forward is about to read."""

from __future__ import annotations

from kvcanary.context import VerifyOrWriteContext
from kvcanary.contract.verify import check_verify
from kvcanary.plans import VerifyPlan
from kvcanary.registry import REGISTRY, Op


def launch_canary_verify_kernel(
    *,
    context: VerifyOrWriteContext,
    plan: VerifyPlan,
    check_verify_expected_token: bool,
    backend: str | None = None,
) -> None:
    """Verify ``plan``'s entries against ``context.canary_buf``; violations go to the ring.

    Never raises because of device data: bad indices are recorded as INDEX_OUT_OF_RANGE violations.
    Raises :class:`~contracts.ContractError` (a ValueError) for a bad call, before anything runs.
    """
    device = check_verify(context=context, plan=plan, check_verify_expected_token=check_verify_expected_token)
    REGISTRY.run(Op.VERIFY, device, backend,
                 {"context": context, "plan": plan, "check_verify_expected_token": check_verify_expected_token})

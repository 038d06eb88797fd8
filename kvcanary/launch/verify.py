"""``launch_canary_verify_kernel``: re-verify the slots a forward is about to read."""

from __future__ import annotations

from kvcanary.contract.verify import VerifyLaunch
from kvcanary.launch._make import launcher
from kvcanary.registry import Op

launch_canary_verify_kernel = launcher(
    VerifyLaunch, Op.VERIFY, __name__,
    """Verify ``plan``'s entries against ``context.canary_buf``; violations go to the ring.

    Never raises because of device data: bad indices are recorded as INDEX_OUT_OF_RANGE violations.
    Raises :class:`~contracts.ContractError` (a ValueError) for a bad call, before anything runs.
    """,
)

"""``launch_canary_plan_kernels``: fill the verify and write plans for one step."""

from __future__ import annotations

from kvcanary.contract.plan import PlanLaunch
from kvcanary.launch._make import launcher
from kvcanary.registry import Op

launch_canary_plan_kernels = launcher(
    PlanLaunch, Op.PLAN, __name__,
    """Verify entries for every prefix token ``[window_start, prefix_len)`` of each active row, and the
    write offsets and seeds for the tokens it writes. Overflow sets ``enable = 0`` instead of raising.""",
)

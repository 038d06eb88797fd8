"""``launch_plan_entries_kernel``: plan stage 2 (one verify entry per prefix token)."""

from __future__ import annotations

from kvcanary.contract.plan_entries import PlanEntriesLaunch
from kvcanary.launch._make import launcher
from kvcanary.registry import Op

launch_plan_entries_kernel = launcher(
    PlanEntriesLaunch, Op.PLAN_ENTRIES, __name__,
    """Write entries ``[0, min(total, capacity))`` where ``total = verify_offsets_scratch[bs]``, unless
    ``verify_enable == 0``. Entries past the total are untouched.""",
)

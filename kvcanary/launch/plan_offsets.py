"""``launch_plan_offsets_kernel``: plan stage 1 (offsets, seeds, overflow)."""

from __future__ import annotations

from kvcanary.contract.plan_offsets import PlanOffsetsLaunch
from kvcanary.launch._make import launcher
from kvcanary.registry import Op

launch_plan_offsets_kernel = launcher(
    PlanOffsetsLaunch, Op.PLAN_OFFSETS, __name__,
    """Write each row's exclusive verify offset (total at ``[bs]``), the write offsets ``[0..bs]``, the
    seeds ``[0, bs)``, ``num_valid``, ``enable`` and ``num_valid_reqs``. Entries past bs are untouched.""",
)

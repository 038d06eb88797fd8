"""``launch_plan_offsets_kernel``: plan stage 1 (offsets, seeds, overflow)."""

from __future__ import annotations

from kvcanary.ops.plan_offsets import launch_plan_offsets_kernel

__all__ = ["launch_plan_offsets_kernel"]

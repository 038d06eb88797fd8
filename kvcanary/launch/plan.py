"""``launch_canary_plan_kernels``: fill the verify and write plans for one step."""

from __future__ import annotations

from kvcanary.ops.plan import launch_canary_plan_kernels

__all__ = ["launch_canary_plan_kernels"]

"""``launch_verify_budget_kernel``: filter a verify plan down to a verification budget's entries."""

from __future__ import annotations

from kvcanary.ops.budget import launch_verify_budget_kernel

__all__ = ["launch_verify_budget_kernel"]

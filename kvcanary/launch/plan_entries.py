"""``launch_plan_entries_kernel``: plan stage 2 (one verify entry per prefix token)."""

from __future__ import annotations

from kvcanary.ops.plan_entries import launch_plan_entries_kernel

__all__ = ["launch_plan_entries_kernel"]

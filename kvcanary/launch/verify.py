"""``launch_canary_verify_kernel``: re-verify the slots a forward is about to read."""

from __future__ import annotations

from kvcanary.ops.verify import launch_canary_verify_kernel

__all__ = ["launch_canary_verify_kernel"]

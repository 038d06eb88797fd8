"""``launch_canary_write_kernel``: stamp the records of the tokens a step writes."""

from __future__ import annotations

from kvcanary.ops.write import launch_canary_write_kernel

__all__ = ["launch_canary_write_kernel"]

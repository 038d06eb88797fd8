"""VerifyOrWriteContext: the buffers one verify or write launch reads and updates."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.consts import CanaryLaunchTag, RealKvHashMode
from kvcanary.sources import RealKvSource


@dataclass(frozen=True, kw_only=True)
class VerifyOrWriteContext:
    """Everything an endpoint (one launch tag) shares across steps.

    ``slot_run_counter`` and ``kernel_run_counter`` are one-element views at ``kernel_kind`` of the
    per-tag counter arrays; ``violation_ring`` / ``violation_write_index`` are shared by every launch.
    """

    canary_buf: torch.Tensor
    kernel_kind: CanaryLaunchTag
    violation_ring: torch.Tensor
    violation_write_index: torch.Tensor
    slot_run_counter: torch.Tensor
    kernel_run_counter: torch.Tensor
    real_kv_sources: tuple[RealKvSource, ...]
    real_kv_hash_mode: RealKvHashMode
    enable_chain_position_assert: torch.Tensor

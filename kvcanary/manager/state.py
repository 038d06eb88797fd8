"""CanaryDeviceState: the device buffers every endpoint of one manager shares.

The ring, its write index and the per-tag counters have SGLang's layout (docs/compatibility.md, Violation rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.consts import NUM_LAUNCH_TAGS, CanaryLaunchTag
from kvcanary.violations import ViolationLog


@dataclass(frozen=True, kw_only=True)
class CanaryDeviceState:
    """The violation ring, per-tag counters, the chain-position assert flag, the overflow counter and the
    expected-token pool (only with the VERIFY_TOKEN check).

    ``skipped_verifies`` counts per-forward verify plans that overflowed their capacity (``enable == 0``):
    a device-side sum, so the host learns it through the pump, never by reading the plan.
    """

    log: ViolationLog
    kernel_run_counters: torch.Tensor
    slot_run_counters: torch.Tensor
    enable_chain_position_assert: torch.Tensor
    skipped_verifies: torch.Tensor
    expected_tokens_pool: torch.Tensor | None

    @classmethod
    def allocate(cls, *, ring_capacity: int, device: torch.device,
                 expected_pool_shape: tuple[int, int] | None) -> CanaryDeviceState:
        return cls(
            log=ViolationLog.allocate(ring_capacity=ring_capacity, device=device),
            kernel_run_counters=torch.zeros(NUM_LAUNCH_TAGS, dtype=torch.int64, device=device),
            slot_run_counters=torch.zeros(NUM_LAUNCH_TAGS, dtype=torch.int64, device=device),
            enable_chain_position_assert=torch.zeros(1, dtype=torch.int32, device=device),
            skipped_verifies=torch.zeros(1, dtype=torch.int64, device=device),
            expected_tokens_pool=(torch.full(expected_pool_shape, -1, dtype=torch.int32, device=device)
                                  if expected_pool_shape is not None else None),
        )

    def kernel_run_counter(self, tag: CanaryLaunchTag) -> torch.Tensor:
        """The one-element view the kernel of ``tag`` increments per launch."""
        return self.kernel_run_counters[int(tag) : int(tag) + 1]

    def slot_run_counter(self, tag: CanaryLaunchTag) -> torch.Tensor:
        return self.slot_run_counters[int(tag) : int(tag) + 1]

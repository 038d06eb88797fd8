"""CanaryDeviceState: the device buffers every endpoint of one manager shares.

The ring, its write index and the per-tag counters have SGLang's layout (docs/compatibility.md, Violation rows).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import torch

from kvcanary.consts import NUM_LAUNCH_TAGS, VIOLATION_FIELDS, CanaryLaunchTag
from kvcanary.violations import ViolationLog


@dataclass(frozen=True, kw_only=True)
class CanaryDeviceState:
    """The violation ring, per-tag counters, the chain-position assert flag, the overflow counter and the
    expected-token pool (only with the VERIFY_TOKEN check).

    ``skipped_verifies`` counts per-forward verify plans that overflowed their capacity (``enable == 0``):
    a device-side sum, so the host learns it through the pump, never by reading the plan.

    ``packed`` (from :meth:`allocate`): the one int64 buffer the write index, both counter arrays, the
    overflow counter and the ring are views of, in the pump's layout (``[write_index, kernel_run_counters,
    slot_run_counters, skipped, ring]``), so the end-of-step snapshot is one device copy. The int32 write
    index is the low half of the first word (the high half stays 0: the index never reaches 2**31).
    """

    log: ViolationLog
    kernel_run_counters: torch.Tensor
    slot_run_counters: torch.Tensor
    enable_chain_position_assert: torch.Tensor
    skipped_verifies: torch.Tensor
    expected_tokens_pool: torch.Tensor | None
    packed: torch.Tensor | None = None

    @classmethod
    def allocate(cls, *, ring_capacity: int, device: torch.device, expected_pool_shape: tuple[int, int] | None,
                 packed: bool = True) -> CanaryDeviceState:
        """``packed=False``: separate buffers, for the compiled manager (compiled, launches that mutate views
        of one buffer left wrong counters behind)."""
        log = ViolationLog.allocate(ring_capacity=ring_capacity, device=device)  # checks the capacity
        n = NUM_LAUNCH_TAGS
        if not packed or sys.byteorder != "little":  # (big-endian: the write index's word is no int64)
            return cls(log=log, kernel_run_counters=torch.zeros(n, dtype=torch.int64, device=device),
                       slot_run_counters=torch.zeros(n, dtype=torch.int64, device=device),
                       enable_chain_position_assert=torch.zeros(1, dtype=torch.int32, device=device),
                       skipped_verifies=torch.zeros(1, dtype=torch.int64, device=device),
                       expected_tokens_pool=_expected_pool(expected_pool_shape, device))
        buf = torch.zeros(2 + 2 * n + ring_capacity * VIOLATION_FIELDS, dtype=torch.int64, device=device)
        ring = buf[2 + 2 * n :].view(ring_capacity, VIOLATION_FIELDS)
        return cls(
            log=ViolationLog(violation_ring=ring, violation_write_index=buf[0:1].view(torch.int32)[0:1]),
            kernel_run_counters=buf[1 : 1 + n],
            slot_run_counters=buf[1 + n : 1 + 2 * n],
            enable_chain_position_assert=torch.zeros(1, dtype=torch.int32, device=device),
            skipped_verifies=buf[1 + 2 * n : 2 + 2 * n],
            expected_tokens_pool=_expected_pool(expected_pool_shape, device),
            packed=buf,
        )

    def kernel_run_counter(self, tag: CanaryLaunchTag) -> torch.Tensor:
        """The one-element view the kernel of ``tag`` increments per launch."""
        return self.kernel_run_counters[int(tag) : int(tag) + 1]

    def slot_run_counter(self, tag: CanaryLaunchTag) -> torch.Tensor:
        return self.slot_run_counters[int(tag) : int(tag) + 1]


def _expected_pool(shape: tuple[int, int] | None, device: torch.device) -> torch.Tensor | None:
    return torch.full(shape, -1, dtype=torch.int32, device=device) if shape is not None else None

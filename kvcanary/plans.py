"""VerifyPlan and WritePlan: the per-launch work lists, allocated once and refilled in place.

Plans own every buffer a launch needs, including the plan kernels' offsets scratch, so no launcher
allocates per call (a CUDA-graph lifetime hazard flagged on SGLang's PR #26807).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.constructors.allocation import check_verify_plan_allocate, check_write_plan_allocate
from kvcanary.consts import PLAN_OFFSETS_SCRATCH_LEN


@dataclass(frozen=True, kw_only=True)
class VerifyPlan:
    """Which slots to verify, against which predecessor, position and (optionally) token.

    ``verify_offsets_scratch`` is kvcanary's addition (int64 ``[PLAN_BS_BLOCK_SIZE + 1]``): the per-request
    exclusive offsets the plan kernels hand from their first stage to their second.
    """

    verify_slot_indices: torch.Tensor
    verify_expected_tokens: torch.Tensor
    verify_expected_positions: torch.Tensor
    verify_prev_slot_indices: torch.Tensor
    verify_num_valid: torch.Tensor
    enable: torch.Tensor
    verify_offsets_scratch: torch.Tensor | None = None

    @staticmethod
    def allocation_bytes(verify_capacity: int) -> int:
        """SGLang's count: four int64 arrays plus two int32 scalars (the scratch is counted separately)."""
        return 4 * verify_capacity * 8 + 2 * 4

    @staticmethod
    def scratch_bytes() -> int:
        return PLAN_OFFSETS_SCRATCH_LEN * 8

    @classmethod
    def allocate(cls, *, verify_capacity: int, device: torch.device | str) -> VerifyPlan:
        check_verify_plan_allocate(verify_capacity=verify_capacity)

        def i64() -> torch.Tensor:
            return torch.empty(verify_capacity, dtype=torch.int64, device=device)

        return cls(
            verify_slot_indices=i64(),
            verify_expected_tokens=i64(),
            verify_expected_positions=i64(),
            verify_prev_slot_indices=i64(),
            verify_num_valid=torch.zeros(1, dtype=torch.int32, device=device),
            enable=torch.ones(1, dtype=torch.int32, device=device),
            verify_offsets_scratch=torch.zeros(PLAN_OFFSETS_SCRATCH_LEN, dtype=torch.int64, device=device),
        )

    @property
    def verify_capacity(self) -> int:
        return int(self.verify_slot_indices.shape[0])

    def zero_for_testing_(self) -> VerifyPlan:
        """Zero everything but the expected tokens (set to -1, "no token check"); also zeroes ``enable``.

        Returns the plan itself, as the reference does, so ``VerifyPlan.allocate(...).zero_for_testing_()``
        chains.
        """
        self.verify_slot_indices.zero_()
        self.verify_expected_tokens.fill_(-1)
        self.verify_expected_positions.zero_()
        self.verify_prev_slot_indices.zero_()
        self.verify_num_valid.zero_()
        self.enable.zero_()
        if self.verify_offsets_scratch is not None:
            self.verify_offsets_scratch.zero_()
        return self


@dataclass(frozen=True, kw_only=True)
class WritePlan:
    """Per request row: where its tokens start in the flat step arrays, and the slot its chain continues."""

    write_offsets: torch.Tensor
    write_seed_slot_indices: torch.Tensor
    write_num_valid_reqs: torch.Tensor

    @staticmethod
    def allocation_bytes(write_req_capacity: int) -> int:
        return (2 * write_req_capacity + 1) * 8 + 4

    @classmethod
    def allocate(cls, *, write_req_capacity: int, device: torch.device | str) -> WritePlan:
        check_write_plan_allocate(write_req_capacity=write_req_capacity)
        return cls(
            write_offsets=torch.zeros(write_req_capacity + 1, dtype=torch.int64, device=device),
            write_seed_slot_indices=torch.empty(write_req_capacity, dtype=torch.int64, device=device),
            write_num_valid_reqs=torch.zeros(1, dtype=torch.int32, device=device),
        )

    @property
    def write_req_capacity(self) -> int:
        return int(self.write_seed_slot_indices.shape[0])

    def zero_for_testing_(self) -> WritePlan:
        """Zero every array; returns the plan itself, as the reference does (so it chains after ``allocate``)."""
        self.write_offsets.zero_()
        self.write_seed_slot_indices.zero_()
        self.write_num_valid_reqs.zero_()
        return self

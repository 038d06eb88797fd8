"""Zero tensors and structures the operations' valid calls are built from (every call is declared beside its
operation, with ``Operation(..., examples=..., call=...)``).

Two sizes, for two readers. The catalog's examples (``examples=``) are shaped like an engine's: 64 KV slots,
a bf16 K buffer of 8 heads x 16 dims, a batch of 3 requests, on the CPU. The conformance kit's calls
(``call=``, :mod:`kvcanary.testing.calls`) are small and take a device: 16 records, a ring of 8 rows, uint8
sources. Every tensor is zeros: no contract reads values.
"""

from __future__ import annotations

from typing import Any

import torch

from kvcanary.consts import (
    CANARY_SLOT_BYTES,
    PLAN_OFFSETS_SCRATCH_LEN,
    VIOLATION_FIELDS,
    CanaryLaunchTag,
    RealKvHashMode,
)
from kvcanary.context import VerifyOrWriteContext
from kvcanary.extensions import Extensions
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.sources import RealKvSource

Call = dict[str, Any]
Device = torch.device | str

# -- the catalog's examples: an engine's shapes, on the CPU ----------------------------------------------
NUM_SLOTS = 64  # KV slots (and canary records)
BS = 3  # requests in the batch
MAX_REQS, MAX_CONTEXT = 8, 64  # req_to_token rows x columns
VERIFY_CAPACITY = 32
WRITE_REQ_CAPACITY = 4
NUM_TOKENS = 6  # tokens this step writes
SWA_WINDOW = 16


def i64(*shape: int, device: Device = "cpu") -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.int64, device=device)


def i32(*shape: int, device: Device = "cpu") -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.int32, device=device)


def engine_source() -> RealKvSource:
    """Layer 0's K buffer of a token-major pool: 8 heads x 16 dims of bf16 per slot (256 bytes)."""
    return RealKvSource(tensor=torch.zeros(NUM_SLOTS, 128, dtype=torch.bfloat16), page_size=1,
                        num_bytes_per_token=256, read_bytes=16)


def engine_context() -> VerifyOrWriteContext:
    """A TAIL K endpoint of the FULL group, with PARTIAL real-KV hashing over one source."""
    return VerifyOrWriteContext(
        canary_buf=torch.zeros(NUM_SLOTS, CANARY_SLOT_BYTES, dtype=torch.uint8),
        kernel_kind=CanaryLaunchTag.TAIL_K_FULL,
        violation_ring=i64(16, 8),
        violation_write_index=i32(1),
        slot_run_counter=i64(1),
        kernel_run_counter=i64(1),
        real_kv_sources=(engine_source(),),
        real_kv_hash_mode=RealKvHashMode.PARTIAL,
        enable_chain_position_assert=i32(1),
    )


def engine_verify_plan(capacity: int = VERIFY_CAPACITY) -> VerifyPlan:
    return VerifyPlan(
        verify_slot_indices=i64(capacity),
        verify_expected_tokens=i64(capacity),
        verify_expected_positions=i64(capacity),
        verify_prev_slot_indices=i64(capacity),
        verify_num_valid=i32(1),
        enable=i32(1),
        verify_offsets_scratch=i64(PLAN_OFFSETS_SCRATCH_LEN),
    )


def engine_write_plan(capacity: int = WRITE_REQ_CAPACITY) -> WritePlan:
    return WritePlan(write_offsets=i64(capacity + 1), write_seed_slot_indices=i64(capacity),
                     write_num_valid_reqs=i32(1))


def every_extension() -> Extensions:
    """Every extension check on."""
    return Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True, write_slot_owner_mismatch=True)


def batch() -> Call:
    """The batch's rows: 3 requests' pool indices, prefix and extend lengths."""
    return {"req_pool_indices": i64(BS), "prefix_lens": i64(BS), "extend_seq_lens": i64(BS)}


# -- the conformance kit's calls: small, on any device ---------------------------------------------------
def source(device: Device = "cpu", *, rows: int = 16, page_size: int = 1, nbpt: int = 64) -> RealKvSource:
    """A zero uint8 source of ``rows`` pages of ``page_size`` tokens of ``nbpt`` bytes, all of them read."""
    t = torch.zeros(rows, page_size * nbpt, dtype=torch.uint8, device=device)
    return RealKvSource(tensor=t, page_size=page_size, num_bytes_per_token=nbpt, read_bytes=nbpt)


def context(device: Device = "cpu", *, num_slots: int = 16, ring: int = 8, sources: int = 1,
            mode: RealKvHashMode = RealKvHashMode.PARTIAL) -> VerifyOrWriteContext:
    """A zero context (chain-position assert off) with ``sources`` zero real-KV sources."""
    return VerifyOrWriteContext(
        canary_buf=torch.zeros(num_slots, CANARY_SLOT_BYTES, dtype=torch.uint8, device=device),
        kernel_kind=CanaryLaunchTag.TAIL_K_FULL,
        violation_ring=torch.zeros(ring, VIOLATION_FIELDS, dtype=torch.int64, device=device),
        violation_write_index=i32(1, device=device), slot_run_counter=i64(1, device=device),
        kernel_run_counter=i64(1, device=device),
        real_kv_sources=tuple(source(device, rows=num_slots) for _ in range(sources)), real_kv_hash_mode=mode,
        enable_chain_position_assert=i32(1, device=device))


def verify_plan(device: Device = "cpu", cap: int = 8) -> VerifyPlan:
    return VerifyPlan.allocate(verify_capacity=cap, device=device)


def write_plan(device: Device = "cpu", cap: int = 4) -> WritePlan:
    return WritePlan.allocate(write_req_capacity=cap, device=device)

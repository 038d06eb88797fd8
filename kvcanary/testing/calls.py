"""Small valid calls of every launcher, for tests, typing checks and the host-overhead benchmark.

Each function returns fresh keyword arguments (no ``backend``) that pass the launcher's contract; tests
mutate one argument to break one rule. Contexts come from :func:`kvcanary.testing.builders.context`.
"""

from __future__ import annotations

from typing import Any

import torch

from kvcanary.consts import PLAN_OFFSETS_SCRATCH_LEN, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.sources import RealKvSource
from kvcanary.testing import builders

Device = torch.device | str


def i64(n: int, device: Device = "cpu") -> torch.Tensor:
    return torch.zeros(n, dtype=torch.int64, device=device)


def i32(n: int, device: Device = "cpu") -> torch.Tensor:
    return torch.zeros(n, dtype=torch.int32, device=device)


def source(device: Device = "cpu", *, rows: int = 16, page_size: int = 1, nbpt: int = 64) -> RealKvSource:
    t = torch.zeros(rows, page_size * nbpt, dtype=torch.uint8, device=device)
    return RealKvSource(tensor=t, page_size=page_size, num_bytes_per_token=nbpt, read_bytes=nbpt)


def context(device: Device = "cpu", *, num_slots: int = 16, ring: int = 8, sources: int = 1,
            mode: RealKvHashMode = RealKvHashMode.PARTIAL) -> VerifyOrWriteContext:
    """A zero context (chain-position assert off) with ``sources`` zero real-KV sources."""
    return builders.context(device, num_slots=num_slots, ring=ring, mode=mode, chain_assert=False,
                             sources=[source(device, rows=num_slots) for _ in range(sources)])


def verify_plan(device: Device = "cpu", cap: int = 8) -> VerifyPlan:
    return VerifyPlan.allocate(verify_capacity=cap, device=device)


def write_plan(device: Device = "cpu", cap: int = 4) -> WritePlan:
    return WritePlan.allocate(write_req_capacity=cap, device=device)


def verify(device: Device = "cpu") -> dict[str, Any]:
    return {"context": context(device), "plan": verify_plan(device), "check_verify_expected_token": False}


def write(device: Device = "cpu", *, assert_inputs: bool = False, tokens: int = 6) -> dict[str, Any]:
    return {
        "context": context(device), "plan": write_plan(device), "input_ids": i64(tokens, device),
        "positions": i64(tokens, device), "out_cache_loc": i64(tokens, device),
        "enable_write_input_assert": assert_inputs,
        "expected_input_tokens": i64(tokens, device) if assert_inputs else None,
        "expected_input_positions": i64(tokens, device) if assert_inputs else None,
    }


def plan(device: Device = "cpu", *, bs: int = 3, swa: int = 0, pool: bool = False) -> dict[str, Any]:
    vp = verify_plan(device)
    return {
        "verify_plan_out": vp, "write_plan_out": write_plan(device), "req_pool_indices": i64(bs, device),
        "prefix_lens": i64(bs, device), "extend_seq_lens": i64(bs, device),
        "req_to_token": i32(4 * 8, device).view(4, 8),
        "swa_window_size": swa, "full_to_swa_index_mapping": i64(17, device) if swa else None,
        "verify_capacity": vp.verify_capacity,
        "req_to_verify_expected_tokens": i32(4 * 8, device).view(4, 8) if pool else None,
        "req_to_verify_expected_tokens_valid_lens": i64(bs, device) if pool else None,
        "kv_token_id_vs_position_offset": 0,
    }


def plan_offsets(device: Device = "cpu", *, bs: int = 3, cap: int = 4) -> dict[str, Any]:
    return {
        "req_pool_indices": i64(bs, device), "prefix_lens": i64(bs, device), "extend_seq_lens": i64(bs, device),
        "req_to_token": i32(32, device).view(4, 8), "full_to_swa_index_mapping": None,
        "out_verify_offsets_scratch": i64(PLAN_OFFSETS_SCRATCH_LEN, device), "out_write_offsets": i64(cap + 1, device),
        "out_write_seed_slot_indices": i64(cap, device), "out_verify_num_valid": i32(1, device),
        "out_verify_enable": i32(1, device), "out_write_num_valid_reqs": i32(1, device), "swa_window_size": 0,
        "verify_capacity": 8,
    }


def plan_entries(device: Device = "cpu", *, bs: int = 3, cap: int = 8, pool: bool = False) -> dict[str, Any]:
    return {
        "req_pool_indices": i64(bs, device), "prefix_lens": i64(bs, device), "req_to_token": i32(32, device).view(4, 8),
        "full_to_swa_index_mapping": None, "verify_offsets_scratch": i64(PLAN_OFFSETS_SCRATCH_LEN, device),
        "verify_enable": i32(1, device),
        "req_to_verify_expected_tokens": i32(32, device).view(4, 8) if pool else None,
        "req_to_verify_expected_tokens_valid_lens": i64(bs, device) if pool else None,
        "out_verify_slot_indices": i64(cap, device), "out_verify_expected_tokens": i64(cap, device),
        "out_verify_expected_positions": i64(cap, device), "out_verify_prev_slot_indices": i64(cap, device),
        "kv_token_id_vs_position_offset": 0, "swa_window_size": 0,
    }


def scatter(device: Device = "cpu", *, bs: int = 2) -> dict[str, Any]:
    return {"flat_in": i64(5, device), "offsets": i64(bs + 1, device), "req_pool_indices": i64(bs, device),
            "pool_out": i32(24, device).view(3, 8)}

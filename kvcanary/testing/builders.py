"""Call builders: one launch's keyword arguments from given tensors, on their device, for every operation.

The conformance kit's base (with :mod:`.calls`, :mod:`.parity` and :mod:`.opcheck`): a :class:`Call` is a
recipe that builds fresh keyword arguments on any device from CPU master tensors, so a backend under test
and torch_ref see identical, unshared inputs, and names the tensors the launch may change. The random parity
scenarios and the benchmark workloads built on these live in the repository's ``tools/`` (development only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kvcanary.consts import (
    CANARY_SLOT_BYTES,
    VIOLATION_FIELDS,
    CanaryLaunchTag,
    RealKvHashMode,
)
from kvcanary.context import VerifyOrWriteContext
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.registry import Op
from kvcanary.sources import RealKvSource

Device = torch.device | str
Kwargs = dict[str, Any]
Outputs = dict[str, torch.Tensor]


@dataclass
class Call:
    """One launch: how to build its arguments, and which of them it may change."""

    op: Op
    make: Callable[[Device], Kwargs]
    outputs: Callable[[Kwargs], Outputs]
    ring_base: int | None = None
    order_sensitive: bool = False
    label: str = ""




def int64_tensor(values: Sequence[int] | torch.Tensor, device: Device) -> torch.Tensor:
    """A fresh int64 tensor on ``device`` (a copy even of a tensor already there: masters stay untouched)."""
    if isinstance(values, torch.Tensor):
        return values.to(device=device, dtype=torch.int64, copy=True)
    return torch.tensor(list(values), dtype=torch.int64, device=device)


def one_element(value: int, dtype: torch.dtype, device: Device) -> torch.Tensor:
    return torch.tensor([value], dtype=dtype, device=device)


def offsets_of(lengths: Sequence[int]) -> list[int]:
    """Exclusive offsets of requests of ``lengths`` tokens, then the total."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


# -- core builders ----------------------------------------------------------------------------------------
def context(device: Device = "cpu", *, num_slots: int = 16, canary_buf: torch.Tensor | None = None,
            sources: Sequence[RealKvSource] = (), mode: RealKvHashMode = RealKvHashMode.NONE,
            ring: int | torch.Tensor = 1024, write_index: int = 0, slot_counter: int = 0, kernel_counter: int = 0,
            chain_assert: bool = True, kind: CanaryLaunchTag = CanaryLaunchTag.TAIL_K_FULL) -> VerifyOrWriteContext:
    """A context: ``canary_buf`` as given (shared, not copied; its device is the context's), else
    ``num_slots`` zero records on ``device``; a ring of ``ring`` zero rows (or the rows given, moved there);
    the write index, counters and chain-position assert as given."""
    buf = (canary_buf if canary_buf is not None
           else torch.zeros(num_slots, CANARY_SLOT_BYTES, dtype=torch.uint8, device=device))
    dev = buf.device
    rows = (torch.zeros(ring, VIOLATION_FIELDS, dtype=torch.int64, device=dev) if isinstance(ring, int)
            else ring.to(dev))
    return VerifyOrWriteContext(
        canary_buf=buf, kernel_kind=kind, violation_ring=rows,
        violation_write_index=one_element(write_index, torch.int32, dev),
        slot_run_counter=one_element(slot_counter, torch.int64, dev),
        kernel_run_counter=one_element(kernel_counter, torch.int64, dev),
        real_kv_sources=tuple(sources), real_kv_hash_mode=mode,
        enable_chain_position_assert=one_element(int(chain_assert), torch.int32, dev))


def context_outputs(kw: Kwargs) -> Outputs:
    """What a verify or write launch may change: the context's buffer, ring, index and counters."""
    ctx: VerifyOrWriteContext = kw["context"]
    return {"canary_buf": ctx.canary_buf, "violation_ring": ctx.violation_ring,
            "violation_write_index": ctx.violation_write_index, "slot_run_counter": ctx.slot_run_counter,
            "kernel_run_counter": ctx.kernel_run_counter}


def verify_plan(slots: torch.Tensor, prevs: torch.Tensor, positions: torch.Tensor,
                tokens: torch.Tensor | None = None, *, num_valid: int | None = None, enable: int = 1) -> VerifyPlan:
    """A plan over the given int64 columns (one length, the capacity; their device): ``tokens=None`` is -1
    everywhere (no token check); ``num_valid`` defaults to the capacity."""
    dev = slots.device
    return VerifyPlan(
        verify_slot_indices=slots.contiguous(), verify_prev_slot_indices=prevs.contiguous(),
        verify_expected_positions=positions.contiguous(),
        verify_expected_tokens=torch.full_like(slots, -1) if tokens is None else tokens.contiguous(),
        verify_num_valid=one_element(slots.shape[0] if num_valid is None else num_valid, torch.int32, dev),
        enable=one_element(enable, torch.int32, dev))




def write_plan(offsets: Sequence[int] | torch.Tensor, seeds: Sequence[int] | torch.Tensor, *,
               num_valid: int | None = None, device: Device = "cpu") -> WritePlan:
    """A write plan: request offsets (capacity + 1 of them), seed slots, ``num_valid`` (default: every row)."""
    seed_t = int64_tensor(seeds, device)
    return WritePlan(write_offsets=int64_tensor(offsets, device), write_seed_slot_indices=seed_t,
                     write_num_valid_reqs=one_element(seed_t.shape[0] if num_valid is None else num_valid, torch.int32,
                                               device))


def write_kwargs(ctx: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor, positions: torch.Tensor,
                 out_cache_loc: torch.Tensor, *, expected_tokens: torch.Tensor | None = None,
                 expected_positions: torch.Tensor | None = None) -> Kwargs:
    """A write launch's arguments; the input assert is on when expected tensors are given."""
    return {"context": ctx, "plan": plan, "input_ids": input_ids, "positions": positions,
            "out_cache_loc": out_cache_loc, "enable_write_input_assert": expected_tokens is not None,
            "expected_input_tokens": expected_tokens, "expected_input_positions": expected_positions}


def plan_kwargs(verify_plan_out: VerifyPlan, write_plan_out: WritePlan, req_pool_indices: torch.Tensor,
                prefix_lens: torch.Tensor, extend_seq_lens: torch.Tensor, req_to_token: torch.Tensor, *,
                window: int = 0, lut: torch.Tensor | None = None, pool: torch.Tensor | None = None,
                valid: torch.Tensor | None = None, capacity: int | None = None, token_offset: int = 0) -> Kwargs:
    """A fused plan launch's arguments (``capacity`` defaults to the verify plan's)."""
    return {"verify_plan_out": verify_plan_out, "write_plan_out": write_plan_out,
            "req_pool_indices": req_pool_indices, "prefix_lens": prefix_lens, "extend_seq_lens": extend_seq_lens,
            "req_to_token": req_to_token, "swa_window_size": window, "full_to_swa_index_mapping": lut,
            "verify_capacity": verify_plan_out.verify_capacity if capacity is None else capacity,
            "req_to_verify_expected_tokens": pool, "req_to_verify_expected_tokens_valid_lens": valid,
            "kv_token_id_vs_position_offset": token_offset}


def plan_outputs(kw: Kwargs, *, scratch: bool = True) -> Outputs:
    """What a fused plan may change: every field of both plans (the offsets scratch if asked and present)."""
    vp: VerifyPlan = kw["verify_plan_out"]
    wp: WritePlan = kw["write_plan_out"]
    names = ["verify_slot_indices", "verify_expected_tokens", "verify_expected_positions",
             "verify_prev_slot_indices", "verify_num_valid", "enable"]
    if scratch and vp.verify_offsets_scratch is not None:
        names.append("verify_offsets_scratch")
    out = {f"verify_plan_out.{k}": getattr(vp, k) for k in names}
    out.update({f"write_plan_out.{k}": getattr(wp, k) for k in
                ("write_offsets", "write_seed_slot_indices", "write_num_valid_reqs")})
    return out


def plan_offsets_kwargs(plan_kw: Kwargs, scratch: torch.Tensor) -> Kwargs:
    """Stage 1 of the plan ``plan_kw`` describes, alone: it fills ``scratch`` and the plans' counts and offsets."""
    vp: VerifyPlan = plan_kw["verify_plan_out"]
    wp: WritePlan = plan_kw["write_plan_out"]
    return {"req_pool_indices": plan_kw["req_pool_indices"], "prefix_lens": plan_kw["prefix_lens"],
            "extend_seq_lens": plan_kw["extend_seq_lens"], "req_to_token": plan_kw["req_to_token"],
            "full_to_swa_index_mapping": plan_kw["full_to_swa_index_mapping"], "out_verify_offsets_scratch": scratch,
            "out_write_offsets": wp.write_offsets, "out_write_seed_slot_indices": wp.write_seed_slot_indices,
            "out_verify_num_valid": vp.verify_num_valid, "out_verify_enable": vp.enable,
            "out_write_num_valid_reqs": wp.write_num_valid_reqs, "swa_window_size": plan_kw["swa_window_size"],
            "verify_capacity": plan_kw["verify_capacity"]}


def plan_entries_kwargs(plan_kw: Kwargs, scratch: torch.Tensor, enable: torch.Tensor | None = None) -> Kwargs:
    """Stage 2 of the plan ``plan_kw`` describes, alone: the verify entries from stage 1's ``scratch``
    (``enable`` defaults to the verify plan's)."""
    vp: VerifyPlan = plan_kw["verify_plan_out"]
    return {"req_pool_indices": plan_kw["req_pool_indices"], "prefix_lens": plan_kw["prefix_lens"],
            "req_to_token": plan_kw["req_to_token"], "full_to_swa_index_mapping": plan_kw["full_to_swa_index_mapping"],
            "verify_offsets_scratch": scratch, "verify_enable": vp.enable if enable is None else enable,
            "req_to_verify_expected_tokens": plan_kw["req_to_verify_expected_tokens"],
            "req_to_verify_expected_tokens_valid_lens": plan_kw["req_to_verify_expected_tokens_valid_lens"],
            "out_verify_slot_indices": vp.verify_slot_indices, "out_verify_expected_tokens": vp.verify_expected_tokens,
            "out_verify_expected_positions": vp.verify_expected_positions,
            "out_verify_prev_slot_indices": vp.verify_prev_slot_indices,
            "kv_token_id_vs_position_offset": plan_kw["kv_token_id_vs_position_offset"],
            "swa_window_size": plan_kw["swa_window_size"]}

"""Helpers for the Triton parity tests: the device under test, stage-alone plan calls, unspecified writes.

- :func:`device`: ``cuda`` when there is one (compiled kernels), else ``cpu`` (the interpreter).
- :func:`plan_offsets_call` / :func:`plan_entries_call`: random calls of the two stage launchers, built
  from ``scenarios.plan_call`` (the scenario module has generators for the fused plan only).
- :func:`without_unspecified`: a write call minus the two things torch_ref documents as unspecified for
  a parallel backend: a slot stored twice by one launch, and a seed slot the same launch stores. The
  scenario generators produce both (padding tails and garbage request rows past ``bs``); the wrapper
  drops every store into such a slot (``out_cache_loc = -1``) and turns such seeds into chain heads (-1),
  so every remaining output is specified and compared exactly.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import torch

from kvcanary.consts import PLAN_OFFSETS_SCRATCH_LEN
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.registry import Op
from kvcanary.testing.scenarios import Call, Device, plan_call


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


# -- plan stages alone ----------------------------------------------------------------------------------
_OFFSETS_OUT = ("out_verify_offsets_scratch", "out_write_offsets", "out_write_seed_slot_indices",
                "out_verify_num_valid", "out_verify_enable", "out_write_num_valid_reqs")
_ENTRIES_OUT = ("out_verify_slot_indices", "out_verify_expected_tokens", "out_verify_expected_positions",
                "out_verify_prev_slot_indices")


def plan_offsets_call(rng: random.Random, *, hostile: bool = False) -> Call:
    """A plan_offsets call on a fused-plan scenario (outputs start as the scenario's garbage)."""
    base = plan_call(rng, hostile=hostile)
    extra = rng.choice([0, 0, 5])

    def make(dev: Device) -> dict[str, Any]:
        kw = base.make(dev)
        vp: VerifyPlan = kw["verify_plan_out"]
        wp: WritePlan = kw["write_plan_out"]
        return {
            "req_pool_indices": kw["req_pool_indices"], "prefix_lens": kw["prefix_lens"],
            "extend_seq_lens": kw["extend_seq_lens"], "req_to_token": kw["req_to_token"],
            "full_to_swa_index_mapping": kw["full_to_swa_index_mapping"],
            "out_verify_offsets_scratch": torch.full((PLAN_OFFSETS_SCRATCH_LEN + extra,), 7, dtype=torch.int64,
                                                     device=dev),
            "out_write_offsets": wp.write_offsets, "out_write_seed_slot_indices": wp.write_seed_slot_indices,
            "out_verify_num_valid": vp.verify_num_valid, "out_verify_enable": vp.enable,
            "out_write_num_valid_reqs": wp.write_num_valid_reqs,
            "swa_window_size": kw["swa_window_size"], "verify_capacity": kw["verify_capacity"],
        }

    return Call(Op.PLAN_OFFSETS, make, lambda kw: {k: kw[k] for k in _OFFSETS_OUT}, label="plan_offsets")


def _consistent_scratch(kw: dict[str, Any]) -> list[int]:
    """Stage 1's verify offsets for the scenario's batch: exclusive offsets, then the total."""
    rpi = kw["req_pool_indices"].tolist()
    prefix = kw["prefix_lens"].tolist()
    swa = kw["swa_window_size"]
    out, run = [], 0
    for rp, p in zip(rpi, prefix, strict=True):
        out.append(run)
        if rp != 0:
            run += max(p - (max(0, p - swa) if swa > 0 else 0), 0)
    return [*out, run]


def plan_entries_call(rng: random.Random, *, hostile: bool = False) -> Call:
    """A plan_entries call: stage 1's real offsets, or (hostile) an arbitrary, even unsorted, scratch."""
    base = plan_call(rng, hostile=hostile)
    cpu_kw = base.make("cpu")
    bs = int(cpu_kw["req_pool_indices"].shape[0])
    cap = int(cpu_kw["verify_capacity"])
    if hostile and rng.random() < 0.6:
        head = [rng.randint(-4, cap + 4) for _ in range(bs)]
        if rng.random() < 0.5:
            head.sort()
        scratch = [*head, rng.randint(-3, cap + 6)]
    else:
        scratch = _consistent_scratch(cpu_kw)
    enable = rng.choice([1, 1, 1, 0, 2])
    tail = [rng.randint(-9, 99) for _ in range(PLAN_OFFSETS_SCRATCH_LEN - len(scratch))]

    def make(dev: Device) -> dict[str, Any]:
        kw = base.make(dev)
        vp: VerifyPlan = kw["verify_plan_out"]
        return {
            "req_pool_indices": kw["req_pool_indices"], "prefix_lens": kw["prefix_lens"],
            "req_to_token": kw["req_to_token"], "full_to_swa_index_mapping": kw["full_to_swa_index_mapping"],
            "verify_offsets_scratch": torch.tensor(scratch + tail, dtype=torch.int64, device=dev),
            "verify_enable": torch.tensor([enable], dtype=torch.int32, device=dev),
            "req_to_verify_expected_tokens": kw["req_to_verify_expected_tokens"],
            "req_to_verify_expected_tokens_valid_lens": kw["req_to_verify_expected_tokens_valid_lens"],
            "out_verify_slot_indices": vp.verify_slot_indices,
            "out_verify_expected_tokens": vp.verify_expected_tokens,
            "out_verify_expected_positions": vp.verify_expected_positions,
            "out_verify_prev_slot_indices": vp.verify_prev_slot_indices,
            "kv_token_id_vs_position_offset": kw["kv_token_id_vs_position_offset"],
            "swa_window_size": kw["swa_window_size"],
        }

    return Call(Op.PLAN_ENTRIES, make, lambda kw: {k: kw[k] for k in _ENTRIES_OUT}, label="plan_entries")


# -- writes without the unspecified parts ------------------------------------------------------------------
def _processed(kw: dict[str, Any]) -> list[tuple[int, int, int]]:
    """``(row, start, end)`` of every request row the write processes (torch_ref's clipping rules)."""
    plan: WritePlan = kw["plan"]
    cap = int(plan.write_seed_slot_indices.shape[0])
    nreq = min(max(int(plan.write_num_valid_reqs[0]), 0), cap)
    offs = plan.write_offsets.tolist()
    ntok = int(kw["input_ids"].shape[0])
    if nreq == 0 or offs[nreq] <= 0:
        return []

    def clip(v: int) -> int:
        return min(max(v, 0), ntok)

    return [(r, clip(offs[r]), clip(offs[r + 1])) for r in range(nreq) if clip(offs[r + 1]) > clip(offs[r])]


def unspecified_parts(kw: dict[str, Any]) -> tuple[list[int], list[int]]:
    """Token indices whose store would hit a slot stored twice, and request rows whose seed is stored."""
    num_slots = int(kw["context"].canary_buf.shape[0])
    loc = kw["out_cache_loc"].tolist()
    rows = _processed(kw)
    stores = Counter(loc[i] for _, s, e in rows for i in range(s, e) if 0 <= loc[i] < num_slots)
    twice = {slot for slot, n in stores.items() if n > 1}
    tokens = sorted({i for _, s, e in rows for i in range(s, e) if loc[i] in twice})
    stored = set(stores) - twice
    seeds = kw["plan"].write_seed_slot_indices.tolist()
    seed_rows = [r for r, _, _ in rows if 0 <= seeds[r] < num_slots and seeds[r] in stored]
    return tokens, seed_rows


def without_unspecified(call: Call) -> Call:
    """The write call with the unspecified parts removed (see the module docstring)."""
    tokens, seed_rows = unspecified_parts(call.make("cpu"))
    if not tokens and not seed_rows:
        return call

    def make(dev: Device) -> dict[str, Any]:
        kw = call.make(dev)
        if tokens:
            kw["out_cache_loc"][torch.tensor(tokens, device=dev)] = -1
        if seed_rows:
            kw["plan"].write_seed_slot_indices[torch.tensor(seed_rows, device=dev)] = -1
        return kw

    return Call(call.op, make, call.outputs, call.ring_base, call.order_sensitive, call.label + "*")

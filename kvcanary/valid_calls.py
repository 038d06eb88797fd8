"""Valid example calls of every contract: the error catalog mutates them into its failing examples.

Each contract has one or more variants (a FULL and an SWA plan, a write with and without the input assert,
...): a mutation is applied to the first variant it fits. Shapes are small but shaped like an engine's
(64 KV slots, a bf16 K buffer of 8 heads x 16 dims, a batch of 3 requests); every tensor is zeros because
no contract reads values.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from kvcanary.consts import (
    CANARY_SLOT_BYTES,
    PLAN_OFFSETS_SCRATCH_LEN,
    CanaryLaunchTag,
    CanaryMode,
    PoolKind,
    RealKvHashMode,
)
from kvcanary.context import VerifyOrWriteContext
from kvcanary.extensions import Extensions
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.manager.batch import CanaryBatch, ExpectedTokens
from kvcanary.manager.budget import VerifyBudget
from kvcanary.manager.pool import PoolGroupSpec
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.sources import RealKvSource
from kvcanary_contracts.counterexamples import ExampleSet, Variant

Call = dict[str, object]

NUM_SLOTS = 64  # KV slots (and canary records)
BS = 3  # requests in the batch
MAX_REQS, MAX_CONTEXT = 8, 64  # req_to_token rows x columns
VERIFY_CAPACITY = 32
WRITE_REQ_CAPACITY = 4
NUM_TOKENS = 6  # tokens this step writes
SWA_WINDOW = 16


def _i64(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.int64)


def _i32(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.int32)


def source() -> RealKvSource:
    """Layer 0's K buffer of a token-major pool: 8 heads x 16 dims of bf16 per slot (256 bytes)."""
    return RealKvSource(tensor=torch.zeros(NUM_SLOTS, 128, dtype=torch.bfloat16), page_size=1,
                        num_bytes_per_token=256, read_bytes=16)


def context() -> VerifyOrWriteContext:
    """A TAIL K endpoint of the FULL group, with PARTIAL real-KV hashing over one source."""
    return VerifyOrWriteContext(
        canary_buf=torch.zeros(NUM_SLOTS, CANARY_SLOT_BYTES, dtype=torch.uint8),
        kernel_kind=CanaryLaunchTag.TAIL_K_FULL,
        violation_ring=_i64(16, 8),
        violation_write_index=_i32(1),
        slot_run_counter=_i64(1),
        kernel_run_counter=_i64(1),
        real_kv_sources=(source(),),
        real_kv_hash_mode=RealKvHashMode.PARTIAL,
        enable_chain_position_assert=_i32(1),
    )


def verify_plan(capacity: int = VERIFY_CAPACITY) -> VerifyPlan:
    return VerifyPlan(
        verify_slot_indices=_i64(capacity),
        verify_expected_tokens=_i64(capacity),
        verify_expected_positions=_i64(capacity),
        verify_prev_slot_indices=_i64(capacity),
        verify_num_valid=_i32(1),
        enable=_i32(1),
        verify_offsets_scratch=_i64(PLAN_OFFSETS_SCRATCH_LEN),
    )


def write_plan(capacity: int = WRITE_REQ_CAPACITY) -> WritePlan:
    return WritePlan(write_offsets=_i64(capacity + 1), write_seed_slot_indices=_i64(capacity),
                     write_num_valid_reqs=_i32(1))


def _ext() -> Extensions:
    return Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True, write_slot_owner_mismatch=True)


def _verify(ext: bool = False) -> Call:
    return {"context": context(), "plan": verify_plan(), "check_verify_expected_token": True,
            **({"extensions": _ext()} if ext else {})}


def _write_ext() -> Call:
    return {**_write(False), "req_pool_indices": _i64(BS), "req_to_token": _i32(MAX_REQS, MAX_CONTEXT),
            "full_to_swa_index_mapping": _i64(NUM_SLOTS + 1),
            "extensions": Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True)}


def _write_owner() -> Call:
    return {**_write(False), "req_pool_indices": _i64(BS), "slot_owner": _i64(NUM_SLOTS),
            "extensions": Extensions(write_slot_owner_mismatch=True)}


def _write(assert_inputs: bool) -> Call:
    return {
        "context": context(),
        "plan": write_plan(),
        "input_ids": _i64(NUM_TOKENS),
        "positions": _i64(NUM_TOKENS),
        "out_cache_loc": _i64(NUM_TOKENS),
        "enable_write_input_assert": assert_inputs,
        "expected_input_tokens": _i64(NUM_TOKENS) if assert_inputs else None,
        "expected_input_positions": _i64(NUM_TOKENS) if assert_inputs else None,
    }


def _batch() -> Call:
    return {"req_pool_indices": _i64(BS), "prefix_lens": _i64(BS), "extend_seq_lens": _i64(BS)}


def _plan(swa: bool = False, pool: bool = False, ext: bool = False) -> Call:
    return {
        "verify_plan_out": verify_plan(),
        "write_plan_out": write_plan(),
        **_batch(),
        "req_to_token": _i32(MAX_REQS, MAX_CONTEXT),
        "swa_window_size": SWA_WINDOW if swa else 0,
        "full_to_swa_index_mapping": _i64(NUM_SLOTS + 1) if swa else None,
        "verify_capacity": VERIFY_CAPACITY,
        "req_to_verify_expected_tokens": _i32(MAX_REQS, MAX_CONTEXT) if pool else None,
        "req_to_verify_expected_tokens_valid_lens": _i64(BS) if pool else None,
        "kv_token_id_vs_position_offset": 0,
        **({"extensions": _ext()} if ext else {}),
    }


def _plan_offsets(swa: bool = False) -> Call:
    return {
        **_batch(),
        "req_to_token": _i32(MAX_REQS, MAX_CONTEXT),
        "full_to_swa_index_mapping": _i64(NUM_SLOTS + 1) if swa else None,
        "out_verify_offsets_scratch": _i64(PLAN_OFFSETS_SCRATCH_LEN),
        "out_write_offsets": _i64(WRITE_REQ_CAPACITY + 1),
        "out_write_seed_slot_indices": _i64(WRITE_REQ_CAPACITY),
        "out_verify_num_valid": _i32(1),
        "out_verify_enable": _i32(1),
        "out_write_num_valid_reqs": _i32(1),
        "swa_window_size": SWA_WINDOW if swa else 0,
        "verify_capacity": VERIFY_CAPACITY,
    }


def _plan_entries(swa: bool = False, pool: bool = False, ext: bool = False) -> Call:
    return {
        "req_pool_indices": _i64(BS),
        "prefix_lens": _i64(BS),
        "req_to_token": _i32(MAX_REQS, MAX_CONTEXT),
        "full_to_swa_index_mapping": _i64(NUM_SLOTS + 1) if swa else None,
        "verify_offsets_scratch": _i64(PLAN_OFFSETS_SCRATCH_LEN),
        "verify_enable": _i32(1),
        "req_to_verify_expected_tokens": _i32(MAX_REQS, MAX_CONTEXT) if pool else None,
        "req_to_verify_expected_tokens_valid_lens": _i64(BS) if pool else None,
        "out_verify_slot_indices": _i64(VERIFY_CAPACITY),
        "out_verify_expected_tokens": _i64(VERIFY_CAPACITY),
        "out_verify_expected_positions": _i64(VERIFY_CAPACITY),
        "out_verify_prev_slot_indices": _i64(VERIFY_CAPACITY),
        "kv_token_id_vs_position_offset": 0,
        "swa_window_size": SWA_WINDOW if swa else 0,
        **({"extensions": _ext()} if ext else {}),
    }


def _scatter() -> Call:
    return {"flat_in": _i64(10), "offsets": _i64(BS + 1), "req_pool_indices": _i64(BS),
            "pool_out": _i32(MAX_REQS, MAX_CONTEXT)}


def _fold() -> Call:
    return {"acc": _i64(2), "canary_buf": torch.zeros(NUM_SLOTS, CANARY_SLOT_BYTES, dtype=torch.uint8),
            "slots": _i64(NUM_TOKENS)}


def _source_call() -> Call:
    s = source()
    return {"tensor": s.tensor, "page_size": s.page_size, "num_bytes_per_token": s.num_bytes_per_token,
            "read_bytes": s.read_bytes}


def _config() -> Call:
    """Every setting given, none at its default: RAISE with PARTIAL hashing, a sweep, a budget, extensions and
    a two-buffer layer rotation."""
    return {"mode": CanaryMode.RAISE, "real_kv_mode": RealKvHashMode.PARTIAL, "sweep_interval": 8,
            "ring_capacity": 256, "enable_v": True, "enable_verify_token": True, "enable_write_input_assert": True,
            "stats_every": 50, "health_warmup_steps": 10, "health_every": 20, "num_forward_slots": 2,
            "backend": "torch_ref", "verify_budget": VerifyBudget(max_entries=64, newest_per_request=2),
            "extensions": Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True), "layer_rotation": 2,
            "compile": True, "on_violation": ViolationPolicy.RAISE}


def _kv(rows: int = NUM_SLOTS) -> torch.Tensor:
    """A layer-0 K or V buffer: 8 heads x 16 dims of bf16 per slot."""
    return torch.zeros(rows, 8, 16, dtype=torch.bfloat16)


def _full_group() -> Call:
    return {"kind": PoolKind.FULL, "k_layer0": _kv(), "v_layer0": _kv(), "swa_window_size": 0,
            "full_to_swa_index_mapping": None, "layers": ()}


def _swa_group() -> Call:
    """A sliding-window group of 32 SWA slots, its table one entry per full slot."""
    return {"kind": PoolKind.SWA, "k_layer0": _kv(32), "v_layer0": _kv(32), "swa_window_size": SWA_WINDOW,
            "full_to_swa_index_mapping": _i64(NUM_SLOTS), "layers": ()}


def _pool(swa: bool) -> Call:
    groups = (PoolGroupSpec(**_full_group()), *((PoolGroupSpec(**_swa_group()),) if swa else ()))  # type: ignore[arg-type]
    return {"groups": groups, "req_to_token": _i32(MAX_REQS, MAX_CONTEXT), "kv_token_id_vs_position_offset": 0}


def _forward(*, snapshot: bool = False, oracle: bool = False) -> Call:
    """A forward of 3 requests writing 6 tokens; with the expected-token snapshot (3 empty rows), or the oracle's
    tokens and positions."""
    call: Call = {"req_pool_indices": _i64(BS), "prefix_lens": _i64(BS), "extend_lens": _i64(BS),
                  "input_ids": _i64(NUM_TOKENS), "positions": _i64(NUM_TOKENS), "out_cache_loc": _i64(NUM_TOKENS)}
    if snapshot:
        call["expected_tokens"] = ExpectedTokens(flat=_i64(0), lens=_i64(BS))
    if oracle:
        call.update(expected_input_tokens=_i64(NUM_TOKENS), expected_input_positions=_i64(NUM_TOKENS))
    return call


def _forward_on_device() -> Call:
    return {"self": CanaryBatch(**_forward()), "device": torch.device("cpu")}  # type: ignore[arg-type]


_CPU = {"device": "cpu"}

ELSEWHERE: Mapping[str, str] = {"BundleLimits": "kvcanary.evidence", "RequestView": "kvcanary.evidence"}
"""Names the example calls use that ``kvcanary`` itself does not export -> the module that does."""

EXAMPLES: Mapping[str, ExampleSet] = {
    "RealKvSource": ExampleSet("RealKvSource", (Variant("layer-0 K buffer", _source_call),)),
    "VerifyPlan.allocate": ExampleSet(
        "VerifyPlan.allocate", (Variant("capacity 32", lambda: {"verify_capacity": VERIFY_CAPACITY}),), _CPU),
    "WritePlan.allocate": ExampleSet(
        "WritePlan.allocate", (Variant("capacity 4", lambda: {"write_req_capacity": WRITE_REQ_CAPACITY}),), _CPU),
    "ViolationLog.allocate": ExampleSet(
        "ViolationLog.allocate", (Variant("1024 rows", lambda: {"ring_capacity": 1024}),), _CPU),
    "CanaryConfig": ExampleSet("CanaryConfig", (Variant("every setting", _config),)),
    "VerifyBudget": ExampleSet(
        "VerifyBudget", (Variant("64 entries", lambda: {"max_entries": 64, "newest_per_request": 2}),)),
    "CanaryCapacities": ExampleSet("CanaryCapacities", (Variant("a 64-slot pool", lambda: {
        "verify_capacity": 3 * NUM_SLOTS, "write_req_capacity": MAX_REQS, "write_token_capacity": 64,
        "sweep_capacity": NUM_SLOTS, "expected_token_capacity": MAX_REQS * MAX_CONTEXT}),)),
    "CanaryCapacities.from_engine": ExampleSet("CanaryCapacities.from_engine", (Variant("a 64-slot pool", lambda: {
        "pool_slot_count": NUM_SLOTS, "max_batch_size": MAX_REQS, "req_rows": MAX_REQS, "max_tokens_per_forward": 64,
        "max_context_len": MAX_CONTEXT, "spec_num_draft_tokens": 0}),)),
    "PoolGroupSpec": ExampleSet("PoolGroupSpec", (
        Variant("FULL group", _full_group),
        Variant("SWA group", _swa_group, "a 16-token window and the full→SWA table"),
    )),
    "KvPoolSpec": ExampleSet("KvPoolSpec", (
        Variant("FULL and SWA groups", lambda: _pool(swa=True)),
        Variant("FULL group", lambda: _pool(swa=False)),
    )),
    "CanaryConfig.from_strings": ExampleSet(
        "CanaryConfig.from_strings", (Variant("SGLang's server strings", lambda: {"mode": "raise",
                                                                                  "real_data": "partial"}),)),
    "ViolationPolicy.parse": ExampleSet(
        "ViolationPolicy.parse", (Variant("a flag's value", lambda: {"value": "isolate", "name": "on_violation"}),)),
    "ExpectedTokens": ExampleSet("ExpectedTokens", (
        Variant("3 empty rows", lambda: {"flat": _i64(0), "lens": _i64(BS)}, "three padding rows"),)),
    "CanaryBatch": ExampleSet("CanaryBatch", (
        Variant("3 requests", _forward),
        Variant("VERIFY_TOKEN snapshot", lambda: _forward(snapshot=True), "with each row's expected tokens"),
        Variant("write-time input assert", lambda: _forward(oracle=True), "with the oracle's tokens and positions"),
    )),
    "CanaryBatch.validate": ExampleSet("CanaryBatch.validate", (Variant("on the CPU", _forward_on_device),)),
    "SweepEntries": ExampleSet("SweepEntries", (Variant("4 cached slots", lambda: {
        "slots": _i64(4), "positions": _i64(4), "prev_slots": _i64(4)}),)),
    "BundleLimits": ExampleSet("BundleLimits", (Variant("the defaults", lambda: {
        "max_bundles": 16, "max_rows": 64, "max_bytes": 1 << 20}),)),
    "RequestView": ExampleSet("RequestView", (Variant("a 3-token request", lambda: {
        "request_id": "req-7", "tokens": (11, 12, 13), "positions": (0, 1, 2), "slots": (40, 41, 42),
        "block_size": 16, "live": True}),)),
    "launch_canary_plan_kernels": ExampleSet("launch_canary_plan_kernels", (
        Variant("FULL group", _plan),
        Variant("SWA group", lambda: _plan(swa=True), "swa_window_size > 0 with the full→SWA table"),
        Variant("token-id pool", lambda: _plan(pool=True), "the expected-token pool and its valid lengths"),
        Variant("extensions", lambda: _plan(ext=True), "every extension check on"),
    )),
    "launch_plan_offsets_kernel": ExampleSet("launch_plan_offsets_kernel", (
        Variant("FULL group", _plan_offsets),
        Variant("SWA group", lambda: _plan_offsets(swa=True)),
    )),
    "launch_plan_entries_kernel": ExampleSet("launch_plan_entries_kernel", (
        Variant("FULL group", _plan_entries),
        Variant("SWA group", lambda: _plan_entries(swa=True)),
        Variant("token-id pool", lambda: _plan_entries(pool=True)),
        Variant("extensions", lambda: _plan_entries(ext=True)),
    )),
    "launch_canary_write_kernel": ExampleSet("launch_canary_write_kernel", (
        Variant("input assert off", lambda: _write(False)),
        Variant("input assert on", lambda: _write(True), "with the oracle's expected tokens and positions"),
        Variant("extensions", _write_ext, "the write-slot check on, with req_to_token and the SWA table"),
        Variant("owner check", _write_owner, "the write-time owner check alone, with the batch's rows and the "
                "owner map"),
    )),
    "launch_canary_verify_kernel": ExampleSet("launch_canary_verify_kernel", (
        Variant("TAIL K, FULL", _verify),
        Variant("extensions", lambda: _verify(ext=True), "every extension check on"),
    )),
    "launch_scatter_req_token_ids_kernel": ExampleSet(
        "launch_scatter_req_token_ids_kernel", (Variant("3 requests", _scatter),)),
    "launch_digest_fold_kernel": ExampleSet(
        "launch_digest_fold_kernel", (Variant("one step's slots", _fold),)),
}
"""Contract name -> its valid calls."""

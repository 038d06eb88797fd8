"""Valid example calls of every contract: the error catalog mutates them into its failing examples.

Each contract has one or more variants (a FULL and an SWA plan, a write with and without the input assert,
...): a mutation is applied to the first variant it fits. An operation's valid calls are declared with it
(``Operation(..., examples=...)`` in :mod:`kvcanary.ops`); this module holds those of the contracts that are
not operations (the configuration objects and the allocators), and :data:`EXAMPLES` joins the two. Shapes
are small but shaped like an engine's (:mod:`kvcanary.ops._calls`); every tensor is zeros because no
contract reads values.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from kvcanary.consts import CanaryMode, PoolKind, RealKvHashMode
from kvcanary.extensions import Extensions
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.manager.batch import CanaryBatch, ExpectedTokens
from kvcanary.manager.budget import VerifyBudget
from kvcanary.manager.capacities import CanaryCapacities
from kvcanary.manager.config import CanaryConfig
from kvcanary.manager.pool import KvPoolSpec, PoolGroupSpec
from kvcanary.operation import BUILTIN_PACKAGE, operations
from kvcanary.ops._calls import (
    BS,
    MAX_CONTEXT,
    MAX_REQS,
    NUM_SLOTS,
    NUM_TOKENS,
    SWA_WINDOW,
    VERIFY_CAPACITY,
    WRITE_REQ_CAPACITY,
    Call,
    engine_source,
    i32,
    i64,
)
from kvcanary_contracts.examples import ExampleSet, Variant


def _source_call() -> Call:
    s = engine_source()
    return {"tensor": s.tensor, "page_size": s.page_size, "num_bytes_per_token": s.num_bytes_per_token,
            "read_bytes": s.read_bytes}


def _config() -> Call:
    """Every setting given, none at its default: RAISE with PARTIAL hashing, a sweep, a budget, extensions and
    a two-buffer layer rotation, guard records of 64 entries."""
    return {"mode": CanaryMode.RAISE, "real_kv_mode": RealKvHashMode.PARTIAL, "sweep_interval": 8,
            "ring_capacity": 256, "enable_v": True, "enable_verify_token": True, "enable_write_input_assert": True,
            "stats_every": 50, "health_warmup_steps": 10, "health_every": 20, "num_forward_slots": 2,
            "backend": "torch_ref", "verify_budget": VerifyBudget(max_entries=64, newest_per_request=2),
            "extensions": Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True), "layer_rotation": 2,
            "compile": True, "graphs": False, "on_violation": ViolationPolicy.RAISE, "guard_history": 64}


def _kv(rows: int = NUM_SLOTS) -> torch.Tensor:
    """A layer-0 K or V buffer: 8 heads x 16 dims of bf16 per slot."""
    return torch.zeros(rows, 8, 16, dtype=torch.bfloat16)


def _full_group() -> Call:
    return {"kind": PoolKind.FULL, "k_layer0": _kv(), "v_layer0": _kv(), "swa_window_size": 0,
            "full_to_swa_index_mapping": None, "layers": ()}


def _swa_group() -> Call:
    """A sliding-window group of 32 SWA slots, its table one entry per full slot."""
    return {"kind": PoolKind.SWA, "k_layer0": _kv(32), "v_layer0": _kv(32), "swa_window_size": SWA_WINDOW,
            "full_to_swa_index_mapping": i64(NUM_SLOTS), "layers": ()}


def _pool(swa: bool) -> Call:
    groups = (PoolGroupSpec(**_full_group()), *((PoolGroupSpec(**_swa_group()),) if swa else ()))
    return {"groups": groups, "req_to_token": i32(MAX_REQS, MAX_CONTEXT), "kv_token_id_vs_position_offset": 0}


def _forward(*, snapshot: bool = False, oracle: bool = False) -> Call:
    """A forward of 3 requests writing 6 tokens; with the expected-token snapshot (3 empty rows), or the oracle's
    tokens and positions."""
    call: Call = {"req_pool_indices": i64(BS), "prefix_lens": i64(BS), "extend_lens": i64(BS),
                  "input_ids": i64(NUM_TOKENS), "positions": i64(NUM_TOKENS), "out_cache_loc": i64(NUM_TOKENS)}
    if snapshot:
        call["expected_tokens"] = ExpectedTokens(flat=i64(0), lens=i64(BS))
    if oracle:
        call.update(expected_input_tokens=i64(NUM_TOKENS), expected_input_positions=i64(NUM_TOKENS))
    return call


def _capacities() -> CanaryCapacities:
    """A 64-slot pool's capacities, the snapshot sized for 3 requests of the full context."""
    return CanaryCapacities(verify_capacity=3 * NUM_SLOTS, write_req_capacity=MAX_REQS, write_token_capacity=64,
                            sweep_capacity=NUM_SLOTS, expected_token_capacity=MAX_REQS * MAX_CONTEXT)


def _manager() -> Call:
    """A FULL pool on the CPU, logging, with layer 0's K/V fingerprinted."""
    return {"pool": KvPoolSpec(**_pool(swa=False)), "capacities": _capacities(),
            "config": CanaryConfig(mode=CanaryMode.LOG, real_kv_mode=RealKvHashMode.PARTIAL)}


def _fits(*, snapshot: bool) -> Call:
    """A forward of 3 requests against the capacities; with the expected-token snapshot (one token per row)
    and the token check on."""
    one_each = ExpectedTokens(flat=i64(BS), lens=torch.ones(BS, dtype=torch.int64))
    batch = CanaryBatch(**_forward(), expected_tokens=one_each if snapshot else None)
    return {"self": _capacities(), "batch": batch, "enable_verify_token": snapshot}


def _forward_on_device() -> Call:
    return {"self": CanaryBatch(**_forward()), "device": torch.device("cpu")}


_CPU = {"device": "cpu"}

ELSEWHERE: Mapping[str, str] = {"BundleLimits": "kvcanary.evidence", "RequestView": "kvcanary.evidence",
                                "SlotJournal": "kvcanary.guard", "attach_config": "kvcanary.integrations.transformers",
                                "RequestTableSizes": "kvcanary.integrations.transformers.settings",
                                "Wire": "kvcanary.distributed", "TransferStart": "kvcanary.distributed.verify",
                                "entries": "kvcanary.distributed.slots", "make_row_source": "kvcanary.manager",
                                "ServeSettings": "kvcanary.serve"}
"""Names the example calls use that ``kvcanary`` itself does not export -> the module that does."""

CONSTRUCTORS: Mapping[str, ExampleSet] = {
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
    "VerifyBudget.period": ExampleSet("VerifyBudget.period", (Variant("4 requests of a 16-token window", lambda: {
        "self": VerifyBudget(max_entries=64, newest_per_request=2), "batch_size": 4, "max_verify_len": 30,
        "slide": 1}),)),
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
    "attach_config": ExampleSet(
        "attach_config", (Variant("the isolate policy", lambda: {"mode": "log", "real_kv": "partial",
                                                                 "on_violation": ViolationPolicy.ISOLATE}),)),
    "RequestTableSizes": ExampleSet("RequestTableSizes", (
        Variant("a table of 16 requests", lambda: {"max_requests": 16, "max_context_len": 2048}),
        Variant("the engine's sizes", lambda: {"max_requests": None, "max_context_len": None}, "both left to None"),
    )),
    "ViolationPolicy.parse": ExampleSet(
        "ViolationPolicy.parse", (Variant("a flag's value", lambda: {"value": "isolate", "name": "on_violation"}),)),
    "ServeSettings": ExampleSet("ServeSettings", (
        Variant("the loopback", lambda: {"host": "127.0.0.1", "port": 8000, "sweep_interval": 4}),
        Variant("any free port", lambda: {"host": "::1", "port": 0, "sweep_interval": 0}, "IPv6, no sweep"),
    )),
    "ExpectedTokens": ExampleSet("ExpectedTokens", (
        Variant("3 empty rows", lambda: {"flat": i64(0), "lens": i64(BS)}, "three padding rows"),)),
    "CanaryBatch": ExampleSet("CanaryBatch", (
        Variant("3 requests", _forward),
        Variant("VERIFY_TOKEN snapshot", lambda: _forward(snapshot=True), "with each row's expected tokens"),
        Variant("write-time input assert", lambda: _forward(oracle=True), "with the oracle's tokens and positions"),
    )),
    "make_row_source": ExampleSet("make_row_source", (Variant("layer 0's K buffer", lambda: {
        "layer_buffer": _kv(), "mode": RealKvHashMode.PARTIAL, "name": "FULL k_layer0"}),)),
    "CanaryManager": ExampleSet("CanaryManager", (Variant("a FULL pool on the CPU", _manager),)),
    "CanaryCapacities.check_batch": ExampleSet("CanaryCapacities.check_batch", (
        Variant("3 requests", lambda: _fits(snapshot=False)),
        Variant("VERIFY_TOKEN snapshot", lambda: _fits(snapshot=True), "with one expected token per row"),
    )),
    "Wire": ExampleSet("Wire", (
        Variant("gloo on the CPU", lambda: {"backend": "gloo", "device": torch.device("cpu")}),)),
    "TransferStart": ExampleSet("TransferStart", (
        Variant("a whole request", lambda: {"first_position": 0, "prev_slot": -1}, "a run from position 0"),)),
    "entries": ExampleSet("entries", (
        Variant("3 slots", lambda: {"values": [5, 6, 7], "name": "slots", "device": torch.device("cpu"),
                                    "num_slots": NUM_SLOTS}, "a host list of the receiver's slots"),
        Variant("3 slots as a tensor", lambda: {"values": torch.tensor([5, 6, 7]), "name": "slots",
                                                "device": torch.device("cpu"), "num_slots": NUM_SLOTS}),
    )),
    "CanaryBatch.validate": ExampleSet("CanaryBatch.validate", (Variant("on the CPU", _forward_on_device),)),
    "SweepEntries": ExampleSet("SweepEntries", (Variant("4 cached slots", lambda: {
        "slots": i64(4), "positions": i64(4), "prev_slots": i64(4)}),)),
    "BundleLimits": ExampleSet("BundleLimits", (Variant("the defaults", lambda: {
        "max_bundles": 16, "max_rows": 64, "max_bytes": 1 << 20}),)),
    "RequestView": ExampleSet("RequestView", (Variant("a 3-token request", lambda: {
        "request_id": "req-7", "tokens": (11, 12, 13), "positions": (0, 1, 2), "slots": (40, 41, 42),
        "block_size": 16, "live": True}),)),
    "SlotJournal": ExampleSet("SlotJournal", (Variant("pages of 16 slots", lambda: {
        "block_size": 16, "per_block": 64, "max_blocks": 1 << 16, "max_finished": 1 << 14,
        "capacity": 1 << 20}),)),
}
"""Contract name -> its valid calls, for the contracts that are not operations."""

EXAMPLES: Mapping[str, ExampleSet] = {
    **CONSTRUCTORS,
    **{op.contract.contract.name: op.examples for op in operations()
       if op.examples is not None and op.module.startswith(BUILTIN_PACKAGE + ".")},
}
"""Contract name -> its valid calls: the constructors', then each built-in operation's (as declared with it).
An operation declared elsewhere carries its own (``op.examples``), which the catalog reads first."""

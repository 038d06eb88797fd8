"""Each fault injected into the real engine is caught: the check that fired, the slot, the reason bits."""

from __future__ import annotations

from typing import Any

import pytest

from kvcanary.consts import FailReason
from kvcanary.integrations.transformers import CanaryReport, TransformersCanary, attach_canaries
from kvcanary.integrations.transformers.faults import FaultHook, TfFault
from kvcanary.integrations.transformers.workload import generate
from tests.integrations.transformers.harness import SEED, SLIDING, first, prompts, run


def _caught(canary: TransformersCanary, hook: FaultHook, check: str, where: str = "") -> CanaryReport:
    """The run's first report, once the fault fired and that report is ``check``'s, at the fault's slot (or one
    of its slots). ``where`` joins the seed in the messages."""
    assert hook.fired_step is not None, f"seed {SEED}: {hook.fault.value} found no place to fire"
    slots = hook.detail["slots"] if "slots" in hook.detail else [hook.detail["slot"]]
    assert isinstance(slots, list)
    r = first(canary)
    assert r.check == check, f"seed {SEED}{where}: {r.event.message}"
    assert r.event.violation.slot_idx in slots
    return r


def _stale_swa_block_caught(canary: TransformersCanary, hook: FaultHook, where: str = "") -> CanaryReport:
    """A swapped sliding-window ring block: the HEAD's SWA verify breaks the chain there, at the fault's step."""
    r = _caught(canary, hook, "per_forward_head_k_swa", where)
    assert r.event.violation.reasons & FailReason.VERIFY_CHAIN_HASH_MISMATCH
    assert r.event.step_recorded == hook.fired_step
    return r


def test_flipped_kv_bytes_in_a_used_block(model: Any) -> None:
    hook = FaultHook(TfFault.KV_FLIP_USED)
    canary, _ = run(model, hook=hook)
    r = _caught(canary, hook, "per_forward_tail_k_full")
    assert r.event.violation.reasons == FailReason.VERIFY_REAL_KV_HASH_MISMATCH
    assert hook.detail["request"] in r.request_ids


def test_block_handed_to_a_second_request_while_referenced(model: Any) -> None:
    hook = FaultHook(TfFault.BLOCK_HANDED_TWICE)
    canary, _ = run(model, hook=hook)
    # the new owner's forward overwrites the block's K/V: the old owner's TAIL sees the bytes change
    r = _caught(canary, hook, "per_forward_tail_k_full")
    assert r.event.violation.reasons == FailReason.VERIFY_REAL_KV_HASH_MISMATCH
    assert hook.detail["request"] in r.request_ids
    # and the old owner's next HEAD verify finds another request's records in its block
    slots = hook.detail["slots"]
    assert isinstance(slots, list)
    heads = [x for x in canary.reports if x.check == "per_forward_head_k_full" and x.event.violation.slot_idx in slots]
    assert heads, f"seed {SEED}: no HEAD report in the reused block"
    assert heads[0].event.violation.reasons & FailReason.VERIFY_CHAIN_HASH_MISMATCH


def test_block_table_entry_pointing_at_another_requests_block(model: Any) -> None:
    hook = FaultHook(TfFault.BLOCK_TABLE_REDIRECT)
    canary, _ = run(model, hook=hook)
    r = _caught(canary, hook, "per_forward_head_k_full")
    assert r.event.violation.reasons == FailReason.VERIFY_CHAIN_HASH_MISMATCH
    assert r.event.step_recorded == hook.fired_step
    assert {hook.detail["request"], hook.detail["victim"]} <= set(r.request_ids)


def test_position_off_by_one(model: Any) -> None:
    hook = FaultHook(TfFault.POSITION_OFF_BY_ONE)
    canary, _ = run(model, hook=hook)
    r = _caught(canary, hook, "per_forward_head_k_full")
    assert r.event.violation.reasons == FailReason.WRITE_POSITION_MISMATCH
    assert r.event.step_recorded == hook.fired_step
    assert hook.detail["request"] in r.request_ids


@SLIDING
def test_stale_sliding_window_block_read(hybrid: Any) -> None:
    hook = FaultHook(TfFault.STALE_SWA_BLOCK)
    canary, _ = run(hybrid, hook=hook)
    r = _stale_swa_block_caught(canary, hook)
    assert {hook.detail["request"], hook.detail["victim"]} <= set(r.request_ids)


@SLIDING
@pytest.mark.parametrize("chunk", [6, 9])
def test_stale_sliding_window_block_read_with_chunks_of_a_whole_window(hybrid: Any, chunk: int) -> None:
    """Prefill chunks as long as tiny_hybrid's window (6) or longer restart the SWA chain at the chunk (the
    seed's ring slot is rewritten in the forward); a swapped ring block is still reported, at its step."""
    hook = FaultHook(TfFault.STALE_SWA_BLOCK)
    with attach_canaries(hybrid) as canary:
        canary.hooks.append(hook)
        generate(hybrid, prompts(), max_batch_tokens=chunk)
    _stale_swa_block_caught(canary, hook, f" chunk {chunk}")

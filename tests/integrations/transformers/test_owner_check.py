"""The write-time owner check on transformers' paged cache: clean runs are silent (prefix hits, de-duplicated
blocks, evictions, chunked prefill), and the ownership faults are reported at the write, naming both requests."""

from __future__ import annotations

from typing import Any

import pytest

from kvcanary.consts import FailReason
from kvcanary.guard import JournalKind, OwnerKind
from kvcanary.integrations.transformers import CanaryReport, StepView, attach_canaries
from kvcanary.integrations.transformers.faults import FaultHook, TfFault
from kvcanary.integrations.transformers.workload import generate
from tests.integrations.transformers.harness import SEED, SLIDING, prompts


class RowsSeen:
    """A step hook keeping each step's ``request id -> req_to_token row`` (what the owner rows name)."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, int]] = {}
        self.scheduled: dict[str, int] = {}  # request id -> the last step that scheduled it

    def __call__(self, view: StepView) -> None:
        self.rows[view.step] = dict(view.rows.row_of)
        for r in view.requests:
            self.scheduled[r.request_id] = view.step

    def requests(self, report: CanaryReport) -> tuple[str, str]:
        """The (writer, holder) request ids of an owner row, at the step that recorded it."""
        v = report.event.violation
        assert v.owners is not None
        by_row = {row: rid for rid, row in self.rows[report.event.step_recorded].items()}
        writer, holder = v.owners
        return by_row[writer], by_row[holder]


def _owner_rows(reports: list[CanaryReport]) -> list[CanaryReport]:
    return [r for r in reports if r.event.violation.reasons & FailReason.WRITE_SLOT_OWNER_MISMATCH]


def _clean(model: Any, workload: list[list[int]], **cb: int) -> tuple[Any, RowsSeen]:
    off = generate(model, workload, **cb)
    seen = RowsSeen()
    with attach_canaries(model, owner_check=True) as canary:
        canary.hooks.append(seen)
        on = generate(model, workload, **cb)
    assert on == off, f"seed {SEED}: canaries changed the generated tokens"
    assert canary.reports == [], (f"seed {SEED}: clean run reported {len(canary.reports)} rows, first: "
                                  f"{canary.reports[0].event.message}")
    return canary, seen


def test_clean_shared_prefix_run_is_silent_though_live_requests_give_blocks_back(model: Any) -> None:
    """transformers de-duplicates a block the last forward completed: the request adopts the identical block
    another request wrote and frees its own copy, which the next allocation hands to another request. The
    map hears of the free from the journal, so the new owner's write is no conflict."""
    workload = prompts() + prompts()[:3]  # identical prompts too: whole prompts shared
    canary, seen = _clean(model, workload)
    assert canary.prefix_hits > 0, "the workload must exercise prefix-shared blocks"
    manager = canary.managers[0]
    assert manager.owners is not None
    journal = manager.journal
    given_back = []  # blocks a request released while it was still scheduled later
    shared = []
    for block in range(canary.layout.num_token_slots // canary.layout.page if canary.layout else 0):
        for e in journal.history(block * journal.block_size):
            if e.owner is None or e.owner.kind is not OwnerKind.REQUEST:
                continue
            if e.kind is JournalKind.RELEASED and seen.scheduled.get(e.owner.id, -1) >= e.step:
                given_back.append((e.owner.id, e.block, e.step))
            if e.kind is JournalKind.SHARED:
                shared.append((e.owner.id, e.block, e.step))
    assert given_back, f"seed {SEED}: no live request gave a de-duplicated block back: the regression is not run"
    assert shared, f"seed {SEED}: no request joined a block it did not write"


def test_clean_runs_under_memory_pressure_and_chunked_prefill_are_silent(model: Any) -> None:
    """Few blocks (the cache evicts its kept blocks to hand them out again), then short prefill chunks."""
    _clean(model, prompts() + prompts()[:2], num_blocks=24, max_requests=2)
    _clean(model, prompts(), max_batch_tokens=5)


@SLIDING
def test_clean_sliding_window_run_is_silent(hybrid: Any) -> None:
    canary, _ = _clean(hybrid, prompts())
    layout = canary.layout
    assert layout is not None and layout.sliding is not None


def test_block_handed_twice_is_reported_at_the_write_naming_both_requests(model: Any) -> None:
    hook = FaultHook(TfFault.BLOCK_HANDED_TWICE)
    seen = RowsSeen()
    with attach_canaries(model, owner_check=True) as canary:
        canary.hooks += [hook, seen]
        generate(model, prompts())
    assert hook.fired_step is not None, f"seed {SEED}: the fault found no place to fire"
    slots = hook.detail["slots"]
    assert isinstance(slots, list)
    first = canary.reports[0]
    # before any read: the second owner's HEAD write into the block is the first report
    assert first.check == "per_forward_head_k_full", f"seed {SEED}: {first.event.message}"
    assert first.event.violation.reasons == FailReason.WRITE_SLOT_OWNER_MISMATCH
    assert first.event.violation.slot_idx in slots
    writer, holder = seen.requests(first)
    assert holder == hook.detail["request"], f"seed {SEED}: {first.event.message}"
    assert writer != holder
    assert {writer, holder} <= set(first.request_ids)
    assert "held by:  req_pool_idx=" in first.event.message
    # the chain checks still see the old owner's overwritten block
    assert any(r.event.violation.reasons & FailReason.VERIFY_REAL_KV_HASH_MISMATCH for r in canary.reports)


def test_a_redirected_entry_is_a_read_the_chain_check_names_both(model: Any) -> None:
    """A block-table entry pointed at another request's block: the redirected request reads that block and
    never writes it, so no owner row; its HEAD verify names both requests, as without the check."""
    hook = FaultHook(TfFault.BLOCK_TABLE_REDIRECT)
    with attach_canaries(model, owner_check=True) as canary:
        canary.hooks.append(hook)
        generate(model, prompts())
    assert hook.fired_step is not None, f"seed {SEED}: the fault found no place to fire"
    first = canary.reports[0]
    assert first.check == "per_forward_head_k_full", f"seed {SEED}: {first.event.message}"
    assert first.event.violation.reasons == FailReason.VERIFY_CHAIN_HASH_MISMATCH
    assert {hook.detail["request"], hook.detail["victim"]} <= set(first.request_ids)
    assert not [r for r in _owner_rows(canary.reports) if r.event.step_recorded < hook.fired_step]


@SLIDING
def test_a_swapped_ring_block_is_written_into_naming_both_requests(hybrid: Any) -> None:
    hook = FaultHook(TfFault.STALE_SWA_BLOCK)
    seen = RowsSeen()
    with attach_canaries(hybrid, owner_check=True) as canary:
        canary.hooks += [hook, seen]
        generate(hybrid, prompts())
    assert hook.fired_step is not None, f"seed {SEED}: the fault found no place to fire"
    owned = [r for r in _owner_rows(canary.reports) if r.check.endswith("_swa")]
    assert owned, f"seed {SEED}: the request never wrote into the other request's ring block"
    slots = hook.detail["slots"]
    assert isinstance(slots, list) and owned[0].event.violation.slot_idx in slots
    assert seen.requests(owned[0]) == (hook.detail["request"], hook.detail["victim"])


def test_owner_check_must_be_a_bool(model: Any) -> None:
    with pytest.raises(TypeError, match="owner_check must be a bool"):
        attach_canaries(model, owner_check="yes")  # type: ignore[arg-type]

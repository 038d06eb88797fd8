"""Fault injection: one switch per KV-cache bug class, each a bug in a code path the engine really runs.

The classes are the ways serving engines have been seen to corrupt their KV cache: slot lifetime (a radix
use-after-free, a double allocation), addressing (wrong cache locations, a recycled row, an off-by-one
position, a stale sliding-window translation, padding rows writing live slots) and content (flipped KV
bytes, a truncated PD transfer); :data:`DESCRIPTIONS` says what each does here.

A :class:`FaultInjector` holds at most one active fault. Engine code asks ``faults.fire(Fault.X, detail)``
at the exact place where the buggy variant of its logic differs from the correct one; the call returns
True (take the buggy branch) while the fault is armed, and records when and how it fired. No fault
touches a canary buffer: the canary has to notice the consequences on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Fault(str, Enum):
    """The bug classes."""

    RADIX_UAF = "radix_uaf"  # abort frees chunk slots the radix tree still holds
    DOUBLE_ALLOC = "double_alloc"  # retract frees the same slots twice: duplicates in the free list
    WRONG_CACHE_LOC = "wrong_cache_loc"  # req_to_token scattered in sorted-row order, out_cache_loc not
    ROW_RECYCLED = "row_recycled"  # abort frees the req_to_token row while the forward still reads it
    POSITION_OFF_BY_ONE = "position_off_by_one"  # positions advanced before the forward, not after
    PADDING_ROW_WRITE = "padding_row_write"  # graph padding tail keeps stale out_cache_loc
    STALE_SWA_TRANSLATION = "stale_swa_translation"  # SWA eviction leaves full→SWA mapping stale
    KV_FLIP_USED = "kv_flip_used"  # in-place K pre-scale on an aliased pool view
    KV_FLIP_CACHED = "kv_flip_cached"  # eviction scrub hits the next LRU leaf instead of the evicted one
    CORRUPTED_TRANSFER = "corrupted_transfer"  # PD transfer drops the last partial chunk of KV
    # caught only with kvcanary.Extensions on (the compatible design misses them by construction)
    PREFIX_MISS_ZERO_ROW = "prefix_miss_zero_row"  # the batch's table gives a prefix miss an all-zero row
    DRAFT_PAST_ALLOCATION = "draft_past_allocation"  # a draft token's KV written past the request's slots
    NULL_BLOCK_IN_WINDOW = "null_block_in_window"  # a null (slot 0) block inside the sliding window


DESCRIPTIONS: dict[Fault, str] = {
    Fault.RADIX_UAF: "abort of a chunked-prefill request frees the chunk slots already inserted in the radix "
    "tree (frees from the admission-time match length instead of the protected length); the tree keeps "
    "pointing at slots that are reallocated and overwritten",
    Fault.DOUBLE_ALLOC: "retract releases the request's KV, then its stale decode-reservation cleanup frees the "
    "same range again; the allocator has no duplicate check, so one slot is handed to two owners",
    Fault.WRONG_CACHE_LOC: "decode slot assignment scatters into req_to_token in sorted-row order while "
    "out_cache_loc stays in batch order: each request's KV lands in a slot another request's row names",
    Fault.ROW_RECYCLED: "abort frees the request's req_to_token row immediately although the in-flight batch "
    "still contains it; a request admitted in the same step gets the row and rewrites it",
    Fault.POSITION_OFF_BY_ONE: "the per-request position counter is advanced before the decode forward instead "
    "of after it (the EAGLE positions bug): RoPE and the stamped positions are one ahead",
    Fault.PADDING_ROW_WRITE: "CUDA-graph padding rows keep the previous replay's out_cache_loc instead of slot 0, "
    "so padding rows write junk K/V into live slots",
    Fault.STALE_SWA_TRANSLATION: "sliding-window eviction frees the SWA slot but leaves full_to_swa_index_mapping "
    "pointing at it; the SWA slot is reused while the mapping still names it",
    Fault.KV_FLIP_USED: "the run-length K gather pre-scales keys in place on a view of the pool, changing the "
    "cached K bytes of a running request's prefix",
    Fault.KV_FLIP_CACHED: "the eviction scrub (zeroing freed KV) zeroes the next LRU leaf, a cached slot no "
    "running request reads, instead of the leaf it just evicted",
    Fault.CORRUPTED_TRANSFER: "the PD transfer copies KV in chunks but computes the chunk count with floor "
    "division, dropping the last partial chunk of K/V bytes while the canary records travel complete",
    Fault.PREFIX_MISS_ZERO_ROW: "the per-batch block table of a batch mixing prefix hits and misses gives a miss "
    "an all-zero row for its first block during one decode forward: attention reads slot 0, which every check "
    "skips as the padding slot",
    Fault.DRAFT_PAST_ALLOCATION: "the draft model's decode writes one draft token's KV at a slot past the "
    "request's allocation (no lookahead slot reserved); the draft KV is rewritten or rolled back afterwards, so "
    "no later read ever sees the stray record",
    Fault.NULL_BLOCK_IN_WINDOW: "a rollback leaves null (slot 0) entries inside a decode request's sliding "
    "window for one forward: attention reads null KV, which every check skips as the padding slot",
}

EXTENSION_FAULTS: frozenset[Fault] = frozenset(
    {Fault.PREFIX_MISS_ZERO_ROW, Fault.DRAFT_PAST_ALLOCATION, Fault.NULL_BLOCK_IN_WINDOW})
"""The classes only the opt-in extension checks catch: the demo runs each with extensions off (missed) and on."""

CORE_FAULTS: tuple[Fault, ...] = tuple(f for f in Fault if f not in EXTENSION_FAULTS)
"""The classes the default (SGLang-compatible) checks catch."""


@dataclass(frozen=True)
class FaultFiring:
    """One time the buggy branch ran: the engine step, and what it did."""

    fault: Fault
    step: int
    detail: str


@dataclass
class FaultInjector:
    """Arms ``fault`` from ``start_step`` on, for at most ``max_fires`` firings (None: unlimited)."""

    fault: Fault | None = None
    start_step: int = 0
    max_fires: int | None = 1
    step: int = 0
    firings: list[FaultFiring] = field(default_factory=list)

    def armed(self, fault: Fault) -> bool:
        """Would ``fire`` take the buggy branch now (without recording anything)?"""
        if self.fault is not fault or self.step < self.start_step:
            return False
        return self.max_fires is None or len(self.firings) < self.max_fires

    def fire(self, fault: Fault, detail: str = "") -> bool:
        """True when the buggy branch should run now; records the firing."""
        if not self.armed(fault):
            return False
        self.firings.append(FaultFiring(fault, self.step, detail))
        return True

    @property
    def first_fired_step(self) -> int | None:
        return self.firings[0].step if self.firings else None



DETECTION_BOUND: dict[Fault, int] = {
    # Steps from the step the buggy branch ran (FaultFiring.step) to the step whose launches recorded the first
    # violation, with the demo's canary (every forward verifies what it reads; a sweep of the cached slots every
    # 2 steps) and pool (LIFO free lists: freed slots are the next ones handed out). A bug whose damage nothing
    # ever reads (an abort's row freed when no request takes it in that step, a scrubbed leaf evicted before the
    # next sweep) leaves no trace: a final sweep finds nothing, and there is nothing to catch.
    Fault.POSITION_OFF_BY_ONE: 0,  # the same forward's write checks position == previous + 1
    Fault.KV_FLIP_USED: 0,  # the same forward's TAIL verify fingerprints the K bytes it has just read
    Fault.ROW_RECYCLED: 1,  # the in-flight forward's plan reads the rewritten row: its HEAD verify
    Fault.CORRUPTED_TRANSFER: 1,  # the decode side's first forward over the transferred KV (TAIL verify)
    Fault.WRONG_CACHE_LOC: 2,  # the next forward of either request verifies its prefix (HEAD)
    Fault.PADDING_ROW_WRITE: 2,  # the slot owner's next TAIL verify, or the next sweep
    Fault.KV_FLIP_CACHED: 2,  # only the sweep reads cached slots: the next one
    # lifetime bugs show once the slot is handed out again and rewritten, then at the stale owner's next read
    # (a forward over the prefix, or the sweep). Freed full slots come back with the next allocations (at most
    # 7 steps in the soak's episodes); a stale SWA slot can wait longer, since every later window eviction frees
    # a slot on top of it: it returns with the next burst of allocations (a prefill), within 11 steps there.
    Fault.RADIX_UAF: 10,
    Fault.DOUBLE_ALLOC: 10,
    Fault.STALE_SWA_TRANSLATION: 20,
    # with extensions on: the same forward's HEAD verify (zero slots) or the draft write itself (write slot)
    Fault.PREFIX_MISS_ZERO_ROW: 0,
    Fault.DRAFT_PAST_ALLOCATION: 0,
    Fault.NULL_BLOCK_IN_WINDOW: 0,
}
"""How many steps after its buggy branch runs each fault class is reported, at most (see the comments)."""

"""The isolate policy in transformers' continuous batching: the journal the session feeds each step, and
the adapter that carries out the manager's decisions in the engine.

Each step, once the canary's rows are synced and before the forward, the guard records what changed: the
blocks the prefix cache keeps, the requests whose block table is gone (they left; finished: the finish step
is kept), and the blocks of each request whose block list changed (from the rows' own change list, so an
unchanged request costs nothing): its block table up to the tokens it has once the step is done, the
sliding group's ring blocks too.
A decision is carried out after the engine's ``update_batch`` of the same step (the step's outputs are in):
each request to fail ends in transformers' failed state (``RequestStatus.FAILED``, ``state.error`` = the
decision's message, delivered like any failed request), its blocks freed; every other request holding a
quarantined block fails too (``KVC-G004``: no decision names it, so the guard reports it to the manager's
sinks); the quarantined blocks lose their prefix-cache hashes, never return to the free lists, and the
prefix cache's unreferenced blocks are dropped (the blocks computed over a corrupt prefix are among them,
and the cache cannot tell which on 5.22+). A request that finished before its
failure could be carried out is kept in :attr:`TfGuard.late`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from kvcanary.guard import GuardDecision, JournalKind, Owner, OwnerKind, RequestFailure
from kvcanary.guard.followup import quarantined_failure
from kvcanary.guard.history import History, HistoryMap
from kvcanary.integrations.transformers.layout import CacheLayout
from kvcanary.integrations.transformers.rows import RequestRows
from kvcanary.manager import CanaryManager

logger = logging.getLogger("kvcanary.transformers")

CACHE_OWNER = Owner(OwnerKind.CACHE, "prefix-cache")

_LOCK = threading.Lock()
_GUARDS: dict[int, TfGuard] = {}  # id(cache) -> its guard
_ORIGINAL: dict[str, Any] = {}


def _processor_class() -> Any:
    from transformers.generation.continuous_batching.continuous_api import ContinuousBatchProcessor

    return ContinuousBatchProcessor


def _install() -> None:
    """Wrap ``ContinuousBatchProcessor.update_batch``: after it, the guard of the processor's cache acts."""
    if "update_batch" in _ORIGINAL:
        return
    cls = _processor_class()
    original = cls.update_batch
    _ORIGINAL["update_batch"] = original

    def update_batch(self: Any) -> None:
        original(self)
        guard = _GUARDS.get(id(self.cache))
        if guard is not None and guard.cache is self.cache:
            guard.carry_out(self)

    update_batch.__wrapped__ = original  # type: ignore[attr-defined]
    cls.update_batch = update_batch


def _uninstall() -> None:
    original = _ORIGINAL.pop("update_batch", None)
    if original is not None:
        _processor_class().update_batch = original


class TfGuard:
    """Journal feeder and :class:`~kvcanary.guard.EngineAdapter` of one paged cache."""

    def __init__(self, manager: CanaryManager, layout: CacheLayout, rows: RequestRows) -> None:
        self.manager = manager
        self.layout = layout
        self.rows = rows
        rows.changes = []  # the rows' syncs tell which requests' block lists changed
        self._owners: dict[str, Owner] = {}
        self.seconds = 0.0
        """Host time spent feeding the journal so far (:meth:`observe`, timed by its caller)."""
        self.compared = 0
        """Block lists looked at so far (one per changed request and step; an unchanged request adds none)."""
        self.cache = layout.cache
        sw = layout.sliding
        manager.set_adapter(self, block_size=layout.stride, swa_block_size=sw.stride if sw is not None else None)
        self._held: dict[str, set[int]] = {}
        self._held_swa: dict[str, set[int]] = {}
        self._cached: set[int] = set()
        self._last: dict[str, list[int]] = {}
        """Per request, its blocks up to its tokens as last looked at."""
        self._rings: dict[str, list[int]] = {}
        """Per request, its sliding ring as last looked at."""
        self._ahead: set[str] = set()
        """Requests whose block table ran past their tokens when last looked at (looked at each step)."""
        self._cached_list: list[int] = []
        self._pending_fail: dict[str, str] = {}
        self._pending_q: set[int] = set()
        self._pending_q_swa: set[int] = set()
        self._pending_step = 0
        """The step of the latest decision handed over (its quarantine's ``KVC-G004`` failures carry it)."""
        self.quarantined: set[int] = set()
        self.quarantined_swa: set[int] = set()
        keep = manager.config.guard_history
        self.failed: HistoryMap[str, str] = HistoryMap(keep, on_drop=self._forget_failed)
        """Request id -> the error it was failed with (the latest request with that id), the newest
        ``config.guard_history`` ids (the monitor counts every failure)."""
        self._failing: set[str] = set()
        """The ids whose latest request was failed: it left, unfinished, when it was failed (transformers freed
        its blocks then). A later request with the id (a client's retry) drops it when it takes its first
        block, even before the rows' next sync, and finishes as any other. An id let go from :attr:`failed`
        leaves it too, so it holds no more than :attr:`failed`'s ids."""
        self.late: HistoryMap[str, str] = HistoryMap(keep)
        """Requests a decision named that had already finished when it was carried out (the newest
        ``config.guard_history``)."""
        self.decisions: History[GuardDecision] = History(keep)
        """The decisions handed to this guard, the newest ``config.guard_history``."""
        self._filter_installed = False
        with _LOCK:
            _install()
            _GUARDS[id(self.cache)] = self

    def _forget_failed(self, rid: str, message: str) -> None:
        """``rid`` was let go from :attr:`failed`: forget it was failing too. It holds no blocks: it left when it
        was failed (:meth:`_fail`), and a later request with its id dropped it from the failing ids at its first
        block."""
        self._failing.discard(rid)

    def close(self) -> None:
        """Stop acting on this cache (the session let it go)."""
        with _LOCK:
            if _GUARDS.get(id(self.cache)) is self:
                del _GUARDS[id(self.cache)]
            if not _GUARDS:
                _uninstall()

    # -- the journal ------------------------------------------------------------------------------------
    def _owner(self, rid: str) -> Owner:
        owner = self._owners.get(rid)
        if owner is None:
            owner = self._owners[rid] = Owner(OwnerKind.REQUEST, rid)
        return owner

    def observe(self, rids: list[str], past: list[int], query: list[int]) -> None:
        """After the rows' sync, before the step's forward: what the cache keeps, who left, what the requests
        whose block list changed hold now. ``rids``, ``past``, ``query``: the step's requests (ids, tokens
        cached before the step, tokens it adds), in token order.

        Only the requests the rows' sync found changed are looked at (and the rare one whose block table runs
        past the tokens it has once the step is done, until it has them): an unchanged request costs nothing.
        The events go in the order the owner map needs (it follows the journal): blocks the cache took first,
        so a leaving request's complete blocks stay read-only; then the blocks requests gave back, whole
        (finished) or one at a time (transformers de-duplicates a block completed by the last forward: the
        request adopts an identical cached block and frees its own copy, which the next allocation may hand
        to another request); then the blocks requests joined without writing them (prefix hits, adopted
        duplicates), before the cache lets go of them; last the fresh blocks requests write."""
        m = self.manager
        step = m.step
        lay = self.layout
        cached_list = lay.cached_blocks()
        cache_changed = cached_list != self._cached_list
        cached: set[int] = self._cached
        if cache_changed:
            self._cached_list = list(cached_list)
            cached = set(cached_list)
            m.journal.record(step, JournalKind.CACHED, sorted(cached - self._cached), CACHE_OWNER)
        changes = self.rows.changes
        look: list[str] = []  # the requests whose block list changed, in the step's order
        if changes:
            for rid, listed in changes:
                if listed is None:
                    if rid in self._held:
                        self._leave(rid, finished=rid not in self._failing)
                else:
                    look.append(rid)
            changes.clear()
        sw = lay.sliding
        every_ring = sw is not None and sw.page != lay.page  # ring growth need not meet a new full block
        if self._ahead or every_ring:
            wanted = set(look) | self._ahead
            look = list(rids) if every_ring else [r for r in rids if r in wanted]
        else:
            wanted = None
        joined: list[tuple[Owner, list[int], list[int]]] = []  # owner, blocks shared, blocks allocated
        if look:
            at = {rid: i for i, rid in enumerate(rids)}
            table = lay.block_table
            page = lay.page
            for rid in look:
                i = at[rid]
                if wanted is None or rid in wanted:
                    self._blocks_of(rid, table.get(rid, []), past[i], query[i], page, joined)
                if sw is not None:
                    self._ring_of(rid, list(sw.block_table.get(rid, [])))
        if joined:
            self._record_joined(step, JournalKind.SHARED, [(owner, shared) for owner, shared, _ in joined])
        if cache_changed:
            m.journal.record(step, JournalKind.RELEASED, sorted(self._cached - cached), CACHE_OWNER)
            self._cached = cached
        if joined:
            self._record_joined(step, JournalKind.ALLOCATED, [(owner, fresh) for owner, _, fresh in joined])

    def _record_joined(self, step: int, kind: JournalKind, parts: list[tuple[Owner, list[int]]]) -> None:
        """One journal call for the step's ``kind`` events of every request (its observers still hear one
        call per request, as from one :meth:`~kvcanary.guard.SlotJournal.record` each)."""
        blocks: list[int] = []
        owners: list[Owner | None] = []
        for owner, part in parts:
            blocks += part
            owners += [owner] * len(part)
        if blocks:
            self.manager.journal.record_each(step, kind, blocks, owners)

    def _blocks_of(self, rid: str, full: list[int], past: int, query: int, page: int,
                   joined: list[tuple[Owner, list[int], list[int]]]) -> None:
        """``rid``'s block list as the step leaves it: the blocks it gave back (recorded), the blocks it
        joined (added to ``joined``); only the blocks up to the tokens it has once the step is done count."""
        self.compared += 1
        n = -(-(past + query) // page)
        blocks = full[:n]
        if len(full) > n:
            self._ahead.add(rid)  # blocks not written yet: looked at again next step
        else:
            self._ahead.discard(rid)
        if self._last.get(rid) == blocks:
            return
        self._last[rid] = blocks
        m = self.manager
        owner = self._owner(rid)
        if rid not in self._held:
            self._failing.discard(rid)  # a new request: a failed one with its id is gone
        old = self._held.get(rid, set())
        gone = old - set(full)
        if gone:
            m.journal.record(m.step, JournalKind.RELEASED, sorted(gone), owner)
        new = set(blocks) - old
        self._held[rid] = (old - gone) | set(blocks)
        if new:
            done = past // page  # blocks complete before this step: this step writes none of them
            shared = sorted({b for b in blocks[:done] if b in new})
            joined.append((owner, shared, sorted(new.difference(shared))))

    def _ring_of(self, rid: str, ring_list: list[int]) -> None:
        """``rid``'s sliding ring as it is now: the ring blocks it gave back and took (the sliding journal)."""
        if self._rings.get(rid) == ring_list:
            return
        self._rings[rid] = ring_list
        m = self.manager
        owner = self._owner(rid)
        ring = set(ring_list)
        held_swa = self._held_swa.get(rid, set())
        gone = held_swa - ring
        if gone:
            m.swa_journal.record(m.step, JournalKind.RELEASED, sorted(gone), owner)
        new = ring - held_swa
        if new:
            m.swa_journal.record(m.step, JournalKind.ALLOCATED, sorted(new), owner)
        self._held_swa[rid] = ring

    def _leave(self, rid: str, *, finished: bool) -> None:
        m = self.manager
        owner = self._owners.pop(rid, None) or Owner(OwnerKind.REQUEST, rid)
        self._last.pop(rid, None)
        self._rings.pop(rid, None)
        self._ahead.discard(rid)
        m.journal.record(m.step, JournalKind.RELEASED, sorted(self._held.pop(rid, set())), owner)
        m.swa_journal.record(m.step, JournalKind.RELEASED, sorted(self._held_swa.pop(rid, set())), owner)
        if finished:
            m.journal.finish(rid, m.step - 1)  # it left in the previous step's update
            m.swa_journal.finish(rid, m.step - 1)

    # -- the adapter ---------------------------------------------------------------------------------------
    def apply(self, decision: GuardDecision) -> None:
        """Called inside the step (its end_step): kept, and carried out after the step's ``update_batch``."""
        self.decisions.append(decision)
        for f in decision.fail:
            self._pending_fail.setdefault(f.request_id, f.message)
        self._pending_q |= set(decision.quarantine)
        self._pending_q_swa |= set(decision.quarantine_swa)
        self._pending_step = decision.step

    def carry_out(self, processor: Any) -> None:
        """After ``update_batch``: fail the requests, quarantine the blocks. The requests failed for holding a
        quarantined block (``KVC-G004``; no decision names them) are reported to the manager's sinks."""
        if not (self._pending_fail or self._pending_q or self._pending_q_swa):
            return
        self._install_filter()
        self.quarantined |= self._pending_q
        self.quarantined_swa |= self._pending_q_swa
        fail = dict(self._pending_fail)
        held: dict[str, RequestFailure] = {}  # the requests failed for a quarantined block they hold
        lay, step = self.layout, self._pending_step
        for rid, blocks in list(lay.block_table.items()):
            bad = sorted(set(blocks) & self.quarantined)
            if bad and rid not in fail:
                held[rid] = quarantined_failure(rid, "block(s)", bad, slot=bad[0] * lay.stride, step=step)
        sw = lay.sliding
        if sw is not None:
            for rid, blocks in list(sw.block_table.items()):
                bad = sorted(set(blocks) & self.quarantined_swa)
                if bad and rid not in fail and rid not in held:
                    held[rid] = quarantined_failure(rid, "ring block(s)", bad, slot=bad[0] * sw.stride, step=step)
        for rid, msg in fail.items():
            self._fail(processor, rid, msg)
        failed = [f for rid, f in held.items() if self._fail(processor, rid, f.message)]
        self._purge()
        self._pending_fail.clear()
        self._pending_q.clear()
        self._pending_q_swa.clear()
        if failed:
            self.manager.report_failures(failed, step=step)

    def _fail(self, processor: Any, rid: str, message: str) -> bool:
        """Fail ``rid`` in transformers with ``message`` (its blocks freed: it leaves now); False when it is
        no longer there to fail (kept in :attr:`late` then, unless its id's latest request was failed already)."""
        sched = processor.scheduler
        state = sched.active_requests.get(rid)
        waiting = False
        if state is None:
            state = sched.waiting_requests.get(rid)
            waiting = state is not None
        if state is None:
            if rid not in self._failing:
                self.late[rid] = message
            return False
        processor._handle_request_error(RuntimeError(message), state)
        if waiting:
            sched.waiting_requests.pop(rid, None)
            if rid in sched.waiting_requests_order:
                sched.waiting_requests_order.remove(rid)
            processor.cache.free_blocks(rid)
        else:
            sched.finish_request(rid)
        self.failed[rid] = message
        self._failing.add(rid)
        if rid in self._held:  # transformers freed its blocks: it left now, unfinished (a retry under its id
            self._leave(rid, finished=False)  # may take blocks before the rows' next sync could tell the leave)
        logger.warning(message)
        return True

    def _install_filter(self) -> None:
        """5.22+: the cache pool never takes a quarantined block back on its free lists."""
        if self._filter_installed or not hasattr(self.cache, "cache_allocators"):
            return
        pool = self.cache.pool
        original = pool.free_blocks
        full_index = self.layout.index
        sw_index = self.layout.sliding.index if self.layout.sliding is not None else None

        def free_blocks(index: int, block_ids: list[int]) -> None:
            held = self.quarantined if index == full_index else self.quarantined_swa if index == sw_index else set()
            original(index, [b for b in block_ids if b not in held])

        pool.free_blocks = free_blocks
        self._filter_installed = True

    def _purge(self) -> None:
        """Out of the prefix cache: the quarantined blocks, and what was computed over them."""
        q = self.quarantined
        if hasattr(self.cache, "cache_allocators"):
            ledger = self.layout.allocator.ledger
            for b in q:
                h = ledger.block_to_hash.pop(b, None)
                if h is not None:
                    ledger.hash_to_block.pop(h, None)
                ledger.cached_blocks.pop(b, None)
            evicted = [b for b in ledger.evict_cached_blocks() if b not in q]
            self.cache.pool.free_blocks(self.layout.index, evicted)
            return
        bm = self.cache._block_manager
        blocks = bm._id_to_block

        def below_quarantine(b: int) -> bool:
            seen = 0
            cur: int | None = b
            while cur is not None and seen < len(blocks) + 1:
                if cur in q:
                    return True
                parent = blocks.get(cur)
                cur = parent.parent_id if parent is not None else None
                seen += 1
            return False

        doomed = [b for b in list(blocks) if below_quarantine(b)]
        for b in doomed:
            blk = blocks[b]
            if blk.hash is not None and bm._hash_to_id.get(blk.hash) == b:
                bm._hash_to_id.pop(blk.hash)
            if blk.ref_count <= 0 or b in q:  # a quarantined block's holders were all failed (a block handed
                # out twice is counted once, so its count can end below zero)
                bm._init_block_ids.pop(b, None)
                blocks.pop(b)
                if b not in q:
                    bm._uninit_block_ids.append(b)
            else:
                blk.hash = None  # still held: no longer matchable, freed as an incomplete block later
        if q:
            bm._uninit_block_ids = type(bm._uninit_block_ids)(b for b in bm._uninit_block_ids if b not in q)

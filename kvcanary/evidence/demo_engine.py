"""kvcanary's demo engine as an evidence source: its ownership changes fed to a :class:`SlotJournal`, its
requests described for bundles, and its violations handed to sinks after each step.

:class:`DemoJournalFeed` wraps the engine's request table, KV memory, radix cache and forward builder on the
instance (the engine's code is unchanged): a slot handed to a request (``reserve``, a PD transfer) is
ALLOCATED, a prefix hit SHARED, a radix insert CACHED, a radix eviction RELEASED by the cache, every return
to the free list FREED, a request leaving RELEASED, and every batch row's slot WRITTEN at its position. The
demo pool has one slot per block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import kvcanary
from kvcanary.demo.engine import Engine
from kvcanary.demo.engine.requests import ReqState, Request
from kvcanary.evidence.describe import RequestView
from kvcanary.guard.journal import JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.guard.sink import GuardSink
from kvcanary.manager import CanaryManager
from kvcanary.manager.stats import StepStats

CACHE_OWNER = Owner(OwnerKind.CACHE, "radix")


def _req(r: Request) -> Owner:
    return Owner(OwnerKind.REQUEST, str(r.rid))


class DemoJournalFeed:
    """Feeds ``journal`` from ``engine``'s ownership changes (install once, right after building it)."""

    def __init__(self, engine: Engine, journal: SlotJournal) -> None:
        self.engine = engine
        self.journal = journal
        table, mem = engine.requests, engine.memory
        rec = self._record

        orig_reserve = table.reserve

        def reserve(req: Request, slots: list[int]) -> None:
            orig_reserve(req, slots)
            rec(JournalKind.ALLOCATED, slots, _req(req))

        orig_admit = table.admit

        def admit(req: Request, slots: list[int], node: Any) -> None:
            orig_admit(req, slots, node)
            rec(JournalKind.SHARED, slots, _req(req))

        orig_receive = table.receive_transfer

        def receive_transfer(req: Request, tokens: Sequence[int], slots: list[int]) -> None:
            orig_receive(req, tokens, slots)
            rec(JournalKind.ALLOCATED, slots, _req(req))

        def leaving(orig: Callable[..., None]) -> Callable[..., None]:
            def wrapped(req: Request, *args: Any, **kwargs: Any) -> None:
                held = mem.r2t.read(req.row, 0, req.alloc_len) if not req.row_released else []
                orig(req, *args, **kwargs)
                rec(JournalKind.RELEASED, held, _req(req))
            return wrapped

        orig_free = mem.free_slots

        def free_slots(slots: list[int]) -> None:
            orig_free(slots)
            rec(JournalKind.FREED, slots, None)

        table.reserve = reserve  # type: ignore[method-assign]
        table.admit = admit  # type: ignore[method-assign]
        table.receive_transfer = receive_transfer  # type: ignore[method-assign]
        table._retire = leaving(table._retire)  # type: ignore[method-assign]
        table._release = leaving(table._release)  # type: ignore[method-assign]
        mem.free_slots = free_slots  # type: ignore[method-assign]
        tree = mem.tree
        if tree is not None:
            orig_insert = tree.insert

            def insert(keys: list[Any], slots: list[int]) -> int:
                present = orig_insert(keys, slots)
                rec(JournalKind.CACHED, slots[present:], CACHE_OWNER)
                return present

            def evicted(slots: list[int]) -> None:
                rec(JournalKind.RELEASED, slots, CACHE_OWNER)
                orig_free(slots)
                rec(JournalKind.FREED, slots, None)

            tree.insert = insert  # type: ignore[method-assign]
            tree._on_free = evicted
        runner = engine.runner
        orig_build = runner.build

        def build(rows: list[Any], **kwargs: Any) -> Any:
            for row in rows:
                if row.req is not None:
                    for pos, loc in zip(row.positions, row.locs, strict=True):
                        if loc > 0:
                            self.journal.record(engine.step_index, JournalKind.WRITTEN, (loc,), _req(row.req),
                                                first_position=pos, last_position=pos)
            return orig_build(rows, **kwargs)

        runner.build = build  # type: ignore[method-assign]

    def _record(self, kind: JournalKind, slots: Sequence[int], owner: Owner | None) -> None:
        blocks = [s for s in slots if s > 0]
        if blocks:
            self.journal.record(self.engine.step_index, kind, blocks, owner)


class DemoDescriber:
    """The demo engine's requests, as bundles describe them (implements ``RequestDescriber``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _slots(self, r: Request) -> list[int]:
        if r.row_released or not r.row or r.state not in (ReqState.PREFILL, ReqState.DECODE, ReqState.TRANSFER):
            return []
        return self.engine.memory.r2t.read(r.row, 0, r.alloc_len)

    def describe_request(self, request_id: str) -> RequestView | None:
        try:
            r = self.engine.requests[int(request_id)]
        except (KeyError, ValueError):
            return None
        slots = self._slots(r)
        n = len(slots)
        tokens = [int(t) for t in r.tokens[:n]] + [-1] * max(0, n - len(r.tokens))
        live = r.state in (ReqState.PREFILL, ReqState.DECODE)
        return RequestView(request_id, tuple(tokens), tuple(range(n)), tuple(slots), 1, live)

    def requests_holding(self, slot: int) -> list[str]:
        return [str(r.rid) for r in self.engine.requests.running if slot in self._slots(r)]

    def engine_version(self) -> str:
        return f"kvcanary demo engine {kvcanary.__version__}"


class SinkFeed:
    """Hands each manager's new violation events to ``sinks`` after a step (what the manager does itself
    once sinks are attached to it). ``sync``: read the ring synchronously after every step
    (:meth:`CanaryManager.flush`), so a bundle captures the state of the very step that recorded its rows
    instead of one step later (the demo does, so that every bundle replays)."""

    def __init__(self, manager: CanaryManager, sinks: Sequence[GuardSink], *, sync: bool = False) -> None:
        self.manager = manager
        self.sinks = list(sinks)
        self.sync = sync
        self._seen = 0

    def __call__(self, _step: int = 0) -> None:
        """End of a step: hand new events to the sinks, then the step's end (``on_step``)."""
        self.capture()
        stats = StepStats.from_snapshot(self.manager.last_snapshot, step=self.manager.step - 1,
                                        sweep_passes=self.manager.sweep_passes, tags=self.manager.active_tags)
        for s in self.sinks:
            s.on_step(stats)

    def capture(self, *, mid_step: bool = False) -> None:
        """Hand the new events to the sinks. ``mid_step``: called inside a step (as a HEAD observer), where
        a synchronous read labels the rows with the previous step; they were recorded in this one."""
        if self.sync:
            self.manager.flush()
        events = self.manager.events
        if len(events) > self._seen:
            new = events[self._seen :]
            if mid_step:
                new = [dataclasses.replace(e, step_recorded=self.manager.step) for e in new]
            self._seen = len(events)
            for s in self.sinks:
                s.on_violations(new)

"""The slot journal's and the bundle sink's host cost per decode step, beside their floor.

``JOURNAL_FEED`` is the hook: what one decode step records into the manager's journal, the way the engines'
feeds record it. It stands for the demo engine's ``JournalFeed``: for ``bs`` requests decoding one token
each into blocks of ``block_size`` slots, one ALLOCATED entry per request that enters a new block, carrying
the position it writes there (the allocation and the write filed as one), the step's in one
:meth:`SlotJournal.record_each` call, with the request ids the engine holds already; nothing for a request
that goes on writing into its block. The demo pool's blocks are one slot each (``block_size=1``: an entry
per request and step). The transformers guard records the same entries without positions (from its rows'
change list).
The floor is the least host bookkeeping that keeps the same events: appending their tuples to a list.
The sink figure is a :class:`BundleSink`'s per-step cost when nothing fires (the ``on_step`` the manager
hands it). The goal for both together: under 2 % of the canary's own per-step host time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable

from kvcanary.guard.journal import JournalKind, Owner, OwnerKind, SlotJournal

JournalFeed = Callable[[SlotJournal, int, int, int], None]
"""(journal, step, bs, block_size) -> None: one decode step's journal feed."""


def _owners(bs: int) -> list[Owner]:
    return [Owner(OwnerKind.REQUEST, str(i)) for i in range(bs)]


_OWNERS: dict[int, list[Owner]] = {}


def decode_step_feed(journal: SlotJournal, step: int, bs: int, block_size: int) -> None:
    """One decode step of ``bs`` requests: request ``i`` writes position ``step`` in its block; a request
    entering a new block (every ``block_size`` steps) records its allocation with that position."""
    if step % block_size:
        return
    owners = _OWNERS.get(bs)
    if owners is None:  # built once per batch size: the engine's request ids exist already
        owners = _OWNERS[bs] = _owners(bs)
    blocks_per_req = 1 << 12
    at = step // block_size
    positions = [step] * bs
    journal.record_each(step, JournalKind.ALLOCATED, [i * blocks_per_req + at for i in range(bs)], owners,
                        positions, positions)


JOURNAL_FEED: JournalFeed = decode_step_feed


def allocated_step_feed(journal: SlotJournal, step: int, bs: int, block_size: int) -> None:
    """What the transformers guard records in a decode step: an ALLOCATED entry per request that enters a new
    block (request ``i``'s blocks as in :func:`decode_step_feed`), all in one call; nothing otherwise."""
    if step % block_size:
        return
    owners = _OWNERS.get(bs)
    if owners is None:
        owners = _OWNERS[bs] = _owners(bs)
    at = step // block_size
    journal.record_each(step, JournalKind.ALLOCATED, [i * (1 << 12) + at for i in range(bs)], owners)


def _floor_step(events: list[tuple[object, ...]], step: int, bs: int, block_size: int) -> None:
    if step % block_size == 0:
        for i in range(bs):
            events.append((step, JournalKind.ALLOCATED, i, step, step))


def _floor_allocated(events: list[tuple[object, ...]], step: int, bs: int, block_size: int) -> None:
    if step % block_size == 0:
        for i in range(bs):
            events.append((step, JournalKind.ALLOCATED, i))


def journal_step_seconds(*, bs: int, steps: int = 256, block_size: int = 16,
                         feed: JournalFeed = JOURNAL_FEED) -> tuple[float, float]:
    """Seconds per decode step of ``feed`` and of its floor (the floor of the feed's own events), over
    ``steps`` steps: the fastest of five rounds each (host noise only ever adds time)."""
    floor_step = _floor_allocated if feed is allocated_step_feed else _floor_step
    figures: list[float] = []
    floors: list[float] = []
    for _ in range(5):
        journal = SlotJournal(block_size=block_size)
        t0 = time.perf_counter()
        for s in range(steps):
            feed(journal, s, bs, block_size)
        figures.append((time.perf_counter() - t0) / steps)
        events: list[tuple[object, ...]] = []
        t0 = time.perf_counter()
        for s in range(steps):
            floor_step(events, s, bs, block_size)
        floors.append((time.perf_counter() - t0) / steps)
    return min(figures), min(floors)


def append_seconds(events: float, *, reps: int = 2000) -> float:
    """The floor of a feed that keeps ``events`` events a step (a mean, so it may be fractional): seconds
    to append that many six-field tuples to a list (the fastest of five rounds of ``reps`` steps)."""
    n = max(0, round(events * reps))
    owner = Owner(OwnerKind.REQUEST, "0")
    rounds = []
    for _ in range(5):
        out: list[tuple[object, ...]] = []
        t0 = time.perf_counter()
        for i in range(n):
            out.append((i, JournalKind.WRITTEN, i, owner, None, None))
        rounds.append((time.perf_counter() - t0) / reps)
    return min(rounds)


def sink_step_seconds(manager: object, *, steps: int = 2000) -> float:
    """Median seconds per step of a :class:`BundleSink` attached to ``manager`` (``add_sink``) when nothing
    fires: the ``on_step`` call the manager's ``end_step`` makes (the check for new rows is the manager's
    own and runs with or without a sink)."""
    from kvcanary.evidence.capture import BundleSink
    from kvcanary.manager import CanaryManager
    from kvcanary.manager.stats import StepStats

    assert isinstance(manager, CanaryManager)
    with tempfile.TemporaryDirectory() as tmp:
        sink = BundleSink(manager, tmp)
        manager.add_sink(sink)
        stats = StepStats.from_snapshot(None, step=0, sweep_passes=0, tags=manager.active_tags)
        rounds = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _s in range(steps):
                for each in manager.sinks:
                    each.on_step(stats)
            rounds.append((time.perf_counter() - t0) / steps)
        manager.sinks.remove(sink)
        sink.close()
    return statistics.median(rounds)

"""The slot journal's and the bundle sink's host cost per decode step, beside their floor.

``JOURNAL_FEED`` is the hook: what one decode step records into the manager's journal, the way the engines'
feeds record it. It stands for the demo engine's ``JournalFeed``: for ``bs`` requests decoding one token
each into blocks of ``block_size`` slots, one ALLOCATED entry per request that enters a new block, carrying
the position it writes there (the allocation and the write filed as one), the step's in one
:meth:`SlotJournal.record_columns` call: the blocks and positions made int64 arrays from the step's lists
(the rows' slot and position lists), the owners the request ids the engine holds already (their array made
once per batch); nothing for a request that goes on writing into its block. The demo pool's blocks are one
slot each (``block_size=1``: an entry per request and step). The transformers guard records the same entries
without positions (from its rows' change list).
The floor is the least host bookkeeping that keeps the same events as columns: the same arrays made from the
same lists and one slice assignment per column (step, kind, block, owner, first and last position) into
preallocated columns. The sink figure is a :class:`BundleSink`'s per-step cost when nothing fires (the
``on_step`` the manager hands it). The goal for both together: under 2 % of the canary's own per-step host
time.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from kvcanary.guard.journal import JournalKind, Owner, OwnerKind, SlotJournal

JournalFeed = Callable[[SlotJournal, int, int, int], None]
"""(journal, step, bs, block_size) -> None: one decode step's journal feed."""

_RIDS: dict[int, npt.NDArray[np.int64]] = {}
_BLOCKS_PER_REQ = 1 << 12


def _rids(bs: int) -> npt.NDArray[np.int64]:
    """Request ids ``0..bs-1`` as the owner codes' array, made once per batch size (the engine's feed keeps
    the array of a steady batch's ids)."""
    rids = _RIDS.get(bs)
    if rids is None:
        rids = _RIDS[bs] = np.arange(bs, dtype=np.int64)
    return rids


def _step_columns(step: int, bs: int, block_size: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The step's blocks and positions, made arrays from the lists a feed has (request ``i``'s blocks start at
    ``i * 4096``)."""
    at = step // block_size
    blocks = np.array([i * _BLOCKS_PER_REQ + at for i in range(bs)], dtype=np.int64)
    return blocks, np.array([step] * bs, dtype=np.int64)


def decode_step_feed(journal: SlotJournal, step: int, bs: int, block_size: int) -> None:
    """One decode step of ``bs`` requests: request ``i`` writes position ``step`` in its block; a request
    entering a new block (every ``block_size`` steps) records its allocation with that position."""
    if step % block_size:
        return
    blocks, positions = _step_columns(step, bs, block_size)
    journal.record_columns(step, JournalKind.ALLOCATED, blocks, _rids(bs), positions, positions)


JOURNAL_FEED: JournalFeed = decode_step_feed


def allocated_step_feed(journal: SlotJournal, step: int, bs: int, block_size: int) -> None:
    """What the transformers guard records in a decode step: an ALLOCATED entry per request that enters a new
    block (request ``i``'s blocks as in :func:`decode_step_feed`), all in one call; nothing otherwise."""
    if step % block_size:
        return
    blocks, _ = _step_columns(step, bs, block_size)
    journal.record_columns(step, JournalKind.ALLOCATED, blocks, _rids(bs))


class FloorColumns:
    """The floor's store: six preallocated int64 columns of ``capacity`` entries, written as a ring."""

    def __init__(self, capacity: int = 1 << 16) -> None:
        self.capacity = capacity
        self.columns = [np.zeros(capacity, dtype=np.int64) for _ in range(6)]
        self.events = 0

    def write(self, step: int, kind: int, blocks: npt.NDArray[np.int64], owners: npt.NDArray[np.int64],
              firsts: npt.NDArray[np.int64] | int, lasts: npt.NDArray[np.int64] | int) -> None:
        n = blocks.shape[0]
        at = self.events % self.capacity
        if at + n > self.capacity:
            at = 0
        end = at + n
        step_c, kind_c, block_c, owner_c, first_c, last_c = self.columns
        step_c[at:end] = step
        kind_c[at:end] = kind
        block_c[at:end] = blocks
        owner_c[at:end] = owners
        first_c[at:end] = firsts
        last_c[at:end] = lasts
        self.events += n


def _floor_step(store: FloorColumns, step: int, bs: int, block_size: int) -> None:
    if step % block_size == 0:
        blocks, positions = _step_columns(step, bs, block_size)
        store.write(step, 0, blocks, _rids(bs), positions, positions)


def _floor_allocated(store: FloorColumns, step: int, bs: int, block_size: int) -> None:
    if step % block_size == 0:
        blocks, _ = _step_columns(step, bs, block_size)
        store.write(step, 0, blocks, _rids(bs), -1, -1)


def journal_step_seconds(*, bs: int, steps: int = 256, block_size: int = 16,
                         feed: JournalFeed = JOURNAL_FEED) -> tuple[float, float]:
    """Seconds per decode step of ``feed`` and of its floor (the floor of the feed's own events), over
    ``steps`` steps: the fastest of five rounds each (host noise only ever adds time). The journal's ring is
    filled before the first round, so every round pays its folds of the events it overwrites (an eighth of
    the ring at a time: at 64 events a step, one fold every 128 steps)."""
    floor_step = _floor_allocated if feed is allocated_step_feed else _floor_step
    figures: list[float] = []
    floors: list[float] = []
    journal = SlotJournal(block_size=block_size)
    store = FloorColumns(journal.capacity)
    start = -(-journal.capacity // bs) * block_size  # the ring full before the first round: every round folds
    for s in range(start):
        feed(journal, s, bs, block_size)
    for r in range(5):
        t0 = time.perf_counter()
        for s in range(start + r * steps, start + (r + 1) * steps):
            feed(journal, s, bs, block_size)
        figures.append((time.perf_counter() - t0) / steps)
        t0 = time.perf_counter()
        for s in range(start + r * steps, start + (r + 1) * steps):
            floor_step(store, s, bs, block_size)
        floors.append((time.perf_counter() - t0) / steps)
    return min(figures), min(floors)


def column_seconds(events: float, *, calls: int = 1, reps: int = 2000) -> float:
    """The floor of a feed that keeps ``events`` events a step (a mean, so it may be fractional) in ``calls``
    record calls: seconds to write them as six column slices a call from arrays already made (the fastest of
    five rounds of ``reps`` steps)."""
    n = max(0, round(events / max(calls, 1)))
    store = FloorColumns()
    blocks = np.arange(n, dtype=np.int64)
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(reps):
            for _c in range(calls):
                store.write(i, 0, blocks, blocks, blocks, blocks)
        rounds.append((time.perf_counter() - t0) / reps)
    return min(rounds)


def append_seconds(events: float, *, reps: int = 2000) -> float:
    """The floor of a feed that keeps ``events`` events a step as tuples (a mean, so it may be fractional):
    seconds to append that many six-field tuples to a list (the fastest of five rounds of ``reps`` steps)."""
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

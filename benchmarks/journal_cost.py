"""The slot journal's and the bundle sink's host cost per decode step, beside their floor.

``JOURNAL_FEED`` is the hook: what one decode step records into the manager's journal, the way the engines'
feeds record it. It stands for the demo engine's ``JournalFeed``: for ``bs`` requests decoding one token
each into blocks of ``block_size`` slots, one ALLOCATED entry per request that enters a new block, carrying
the position it writes there (the allocation and the write filed as one), the step's in one
:meth:`SlotJournal.record_each` call, with the request ids the engine holds already (the same owners list
every step, as a steady batch passes it); nothing for a request that goes on writing into its block. The
demo pool's blocks are one slot each (``block_size=1``: an entry per request and step). The transformers
guard records the same entries without positions (from its rows' change list).

The figure is timed on a journal that has already recorded a full ring of the same feed (a long-running
journal), so the timed steps include their share of the flushes into the ring and of the folds of the events
that leave it. The floor is the least copy that keeps the same events: the step's blocks, positions and owner
codes copied into machine arrays (the journal's own first step; everything after it is the journal's
bookkeeping). The sink figure is a :class:`BundleSink`'s per-step cost when nothing fires (the ``on_step``
the manager hands it). The goal for both together: under 2 % of the canary's own per-step host time.

:func:`churn_feed` is the same decode with requests finishing all the time, as in a server: every ``every``
steps one request finishes (``journal.finish``) and a new one takes its row, every fourth new one with the id
of a request that finished earlier (a client's retry, or an engine that takes the client's id): the journal
then restarts that id. Usage (repository root, any machine)::

    python benchmarks/journal_cost.py [--bs 64] [--every 1,16]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from array import array
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvcanary.guard.journal import JournalKind, Owner, OwnerKind, SlotJournal

JournalFeed = Callable[[SlotJournal, int, int, int], None]
"""(journal, step, bs, block_size) -> None: one decode step's journal feed."""

Kept = list[tuple["array[int]", ...]]
"""What a floor keeps per step: the machine arrays its events were copied into."""

BLOCKS_PER_REQUEST = 1 << 12
"""Request ``i``'s blocks are ``i * BLOCKS_PER_REQUEST + k``, ``k`` cycling through them (a request holds its
blocks: entering one again re-records its own allocation)."""


def _owners(bs: int) -> list[Owner]:
    return [Owner(OwnerKind.REQUEST, str(i)) for i in range(bs)]


_OWNERS: dict[int, list[Owner]] = {}


def _batch(bs: int) -> list[Owner]:
    owners = _OWNERS.get(bs)
    if owners is None:  # built once per batch size: the engine's request ids exist already
        owners = _OWNERS[bs] = _owners(bs)
    return owners


def _entered(step: int, bs: int, block_size: int) -> list[int]:
    """The blocks the ``bs`` requests enter at ``step`` (one each; the engine has their ids in a list)."""
    at = (step // block_size) % BLOCKS_PER_REQUEST
    return list(range(at, at + bs * BLOCKS_PER_REQUEST, BLOCKS_PER_REQUEST))


def decode_step_feed(journal: SlotJournal, step: int, bs: int, block_size: int) -> None:
    """One decode step of ``bs`` requests: request ``i`` writes position ``step`` in its block; a request
    entering a new block (every ``block_size`` steps) records its allocation with that position."""
    if step % block_size:
        return
    positions = [step] * bs
    journal.record_each(step, JournalKind.ALLOCATED, _entered(step, bs, block_size), _batch(bs), positions,
                        positions)


JOURNAL_FEED: JournalFeed = decode_step_feed


def allocated_step_feed(journal: SlotJournal, step: int, bs: int, block_size: int) -> None:
    """What the transformers guard records in a decode step: an ALLOCATED entry per request that enters a new
    block (request ``i``'s blocks as in :func:`decode_step_feed`), all in one call; nothing otherwise."""
    if step % block_size:
        return
    journal.record_each(step, JournalKind.ALLOCATED, _entered(step, bs, block_size), _batch(bs))


RETRY_EVERY = 4
"""In :func:`churn_feed`, every this many new requests one takes the id of a request that finished earlier."""
RETRY_AGE = 50
"""The retried id is that of the request that finished this many finishes earlier."""


def churn_feed(every: int) -> JournalFeed:
    """:func:`decode_step_feed` with a request finishing every ``every`` steps (its row taken by a new request;
    every :data:`RETRY_EVERY`-th new one reuses the id of the request :data:`RETRY_AGE` finishes earlier).
    The feed keeps its batch between calls: a fresh one per timed journal."""
    ids: list[str] = []
    owners: list[Owner] = []
    done: list[str] = []

    def feed(journal: SlotJournal, step: int, bs: int, block_size: int) -> None:
        if not ids:
            ids.extend(str(i) for i in range(bs))
            owners.extend(_owners(bs))
        if step % every == 0:
            row = step % bs
            journal.finish(ids[row], step)
            done.append(ids[row])
            new = len(done) + bs
            rid = done[-RETRY_AGE] if new % RETRY_EVERY == 0 and len(done) > RETRY_AGE else str(new)
            ids[row], owners[row] = rid, Owner(OwnerKind.REQUEST, rid)
        if step % block_size == 0:
            positions = [step] * bs
            journal.record_each(step, JournalKind.ALLOCATED, _entered(step, bs, block_size), owners, positions,
                                positions)
    return feed


_CODES: dict[int, array[int]] = {}


def _codes(bs: int) -> array[int]:
    """A steady batch's owner codes (what the journal keeps per call once it has seen the batch)."""
    codes = _CODES.get(bs)
    if codes is None:
        codes = _CODES[bs] = array("q", range(bs))
    return codes


def _floor_step(kept: Kept, step: int, bs: int, block_size: int) -> None:
    if step % block_size == 0:
        positions = [step] * bs
        kept.append((array("Q", _entered(step, bs, block_size)), array("Q", positions), _codes(bs)[:]))


def _floor_allocated(kept: Kept, step: int, bs: int, block_size: int) -> None:
    if step % block_size == 0:
        kept.append((array("Q", _entered(step, bs, block_size)), _codes(bs)[:]))


def journal_step_seconds(*, bs: int, steps: int = 4096, block_size: int = 16,
                         feed: JournalFeed = JOURNAL_FEED, warm_steps: int = 1 << 17) -> tuple[float, float]:
    """Seconds per decode step of ``feed`` and of its floor (the floor of the feed's own events), over
    ``steps`` steps: the fastest of five rounds each (host noise only ever adds time). Each round's journal
    first records the feed until its ring is full (at most ``warm_steps`` steps, untimed), so the timed steps
    pay their share of the flushes and of the folds, as in a long-running journal."""
    floor_step = _floor_allocated if feed is allocated_step_feed else _floor_step
    figures: list[float] = []
    floors: list[float] = []
    for _ in range(5):
        journal = SlotJournal(block_size=block_size)
        s0 = 0
        while journal.recorded < journal.capacity and s0 < warm_steps:
            feed(journal, s0, bs, block_size)
            s0 += 1
        t0 = time.perf_counter()
        for s in range(s0, s0 + steps):
            feed(journal, s, bs, block_size)
        figures.append((time.perf_counter() - t0) / steps)
        kept: Kept = []
        t0 = time.perf_counter()
        for s in range(s0, s0 + steps):
            floor_step(kept, s, bs, block_size)
        floors.append((time.perf_counter() - t0) / steps)
    return min(figures), min(floors)


def append_seconds(events: float, *, reps: int = 2000) -> float:
    """The floor of a feed that keeps ``events`` events a step (a mean, so it may be fractional): seconds to
    copy that many events' blocks, positions and owner codes from lists into machine arrays, one call's worth
    a step (the fastest of five rounds of ``reps`` steps)."""
    n = max(0, round(events))
    blocks, positions, codes = list(range(n)), [0] * n, list(range(n))
    rounds = []
    for _ in range(5):
        kept: Kept = []
        t0 = time.perf_counter()
        for _s in range(reps):
            kept.append((array("Q", blocks), array("Q", positions), array("q", codes)))
        rounds.append((time.perf_counter() - t0) / reps)
    return min(rounds)


BUSY_SHARERS = 8
"""Requests that share the busy block (a shared prefix's block) and release it again, each step."""
BUSY_WRITES = 48
"""Other writes each step beside the busy block's (one block each, as :func:`decode_step_feed`'s)."""


def busy_block_feed(journal: SlotJournal, step: int) -> None:
    """One step around a busy block: :data:`BUSY_SHARERS` requests share block 0 and release it (one
    ``record_each`` each), beside :data:`BUSY_WRITES` other requests' writes (an ALLOCATED with its position
    each, in one call): a quarter of the step's events name block 0, so a full ring holds about 2**18 of them."""
    sharers = _BUSY_OWNERS[:BUSY_SHARERS]
    blocks = [0] * BUSY_SHARERS
    journal.record_each(step, JournalKind.SHARED, blocks, sharers)
    positions = [step] * BUSY_WRITES
    at = 1 + step % BLOCKS_PER_REQUEST
    writes = list(range(at, at + BUSY_WRITES * BLOCKS_PER_REQUEST, BLOCKS_PER_REQUEST))
    journal.record_each(step, JournalKind.ALLOCATED, writes, _BUSY_OWNERS[BUSY_SHARERS:], positions, positions)
    journal.record_each(step, JournalKind.RELEASED, blocks, sharers)


_BUSY_OWNERS = _owners(BUSY_SHARERS + BUSY_WRITES)


def release_path(journal: SlotJournal) -> None:
    """Attach what the owner map does on a RELEASED call: ``holders()`` of each released block's first slot
    (:meth:`kvcanary.manager.owners.OwnerMap`'s release path, without its device queue)."""
    bs = journal.block_size

    def on_release(step: int, kind: JournalKind, blocks: list[int], owner: Owner | None) -> None:
        for b in blocks:
            journal.holders(b * bs)

    journal.add_observer(on_release, kinds={JournalKind.RELEASED})


def busy_block_step_seconds(*, steps: int = 512, rounds: int = 3) -> tuple[float, float]:
    """Seconds per step of :func:`busy_block_feed` with the owner map's release path attached
    (:func:`release_path`: ``holders()`` per released block, 8 a step), on a journal whose ring was first
    filled by the same feed (untimed, without the release path), and the floor: that step's events copied into
    machine arrays (:func:`append_seconds`). The fastest of ``rounds`` rounds."""
    figures = []
    for _ in range(rounds):
        journal = SlotJournal(block_size=1)
        s0 = 0
        while journal.recorded < journal.capacity:
            busy_block_feed(journal, s0)
            s0 += 1
        release_path(journal)
        t0 = time.perf_counter()
        for s in range(s0, s0 + steps):
            busy_block_feed(journal, s)
        figures.append((time.perf_counter() - t0) / steps)
    return min(figures), append_seconds(2 * BUSY_SHARERS + BUSY_WRITES)


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


def main(argv: list[str] | None = None) -> int:
    """Print the journal's per-step figure beside its floor for the steady feed and the churn feeds."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--bs", type=int, default=64)
    ap.add_argument("--every", default="1,16", help="churn feeds: a request finishes every N steps (comma list)")
    args = ap.parse_args(argv)
    feeds: list[tuple[str, Callable[[], JournalFeed]]] = [("steady decode", lambda: decode_step_feed)]
    feeds += [(f"a finish every {n} step(s), ids reused", functools.partial(churn_feed, int(n)))
              for n in args.every.split(",") if n]
    print(f"slot journal per decode step, bs {args.bs}, one-slot blocks (fastest of 5 rounds, full ring)")
    for name, make in feeds:
        fig, floor = journal_step_seconds(bs=args.bs, block_size=1, feed=_fresh(make))
        print(f"  {name:<36} {fig * 1e6:7.2f} us  floor {floor * 1e6:5.2f} us  ({fig / floor:.2f}x)")
    return 0


def _fresh(make: Callable[[], JournalFeed]) -> JournalFeed:
    """A feed that starts a new ``make()`` (a new batch) whenever it is handed a journal it has not seen."""
    current: list[tuple[SlotJournal, JournalFeed]] = []

    def feed(journal: SlotJournal, step: int, bs: int, block_size: int) -> None:
        if not current or current[0][0] is not journal:
            current[:] = [(journal, make())]
        current[0][1](journal, step, bs, block_size)
    return feed


if __name__ == "__main__":
    raise SystemExit(main())

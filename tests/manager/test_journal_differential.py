"""``SlotJournal`` against :class:`ReferenceJournal` (its answers before the columnar rewrite) over seeded
random event streams and a Hypothesis strategy.

Both journals get the same calls (``record`` and ``record_each`` of every kind, duplicate blocks in a call,
positions given or not, blocks freed and re-allocated, owners released twice, quarantine and reinstate,
``finish``, ``end``); after every few calls every slot's answers must be the same lists (owners in the order they took
the block), and the observers must have heard the same calls. The real journal is built with tiny internal
sizes where its constructor has them (``capacity``: a ring that wraps many times in a long stream); the
reference's bounds never bind. Where the real journal says what its ring still holds (``covers(step)``), a
window it does not cover may miss holders but never name one the reference does not, and it must cover
every step whose events are all among the last ``capacity // 2`` recorded.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcanary.guard import journal as journal_module
from kvcanary.guard.journal import JournalEvent, JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.guard.journal_codes import OwnerCodes
from tests.manager.journal_reference import ReferenceJournal

CACHE = Owner(OwnerKind.CACHE, "radix")
"""The prefix cache's owner (one entry holding every cached block, as the demo engine files it)."""

KINDS = tuple(JournalKind)
WEIGHTS = {JournalKind.ALLOCATED: 0.2, JournalKind.SHARED: 0.1, JournalKind.WRITTEN: 0.2, JournalKind.CACHED: 0.06,
           JournalKind.RELEASED: 0.2, JournalKind.FREED: 0.12, JournalKind.QUARANTINED: 0.06,
           JournalKind.REINSTATED: 0.06}
_P = np.array([WEIGHTS[k] for k in KINDS]) / sum(WEIGHTS.values())

NEVER_BINDS = {"per_block": 1 << 20, "max_blocks": 1 << 20, "max_finished": 1 << 20}
"""Bounds the reference gets (and the real journal where its constructor has them): nothing is ever dropped."""

Heard = list[tuple[int, JournalKind, list[int], Owner | None]]


def req(i: int | str) -> Owner:
    return Owner(OwnerKind.REQUEST, f"r{i}")


# -- the calls ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    """One ``record`` call; ``form`` is how the blocks are passed (a list, a tuple or a generator)."""

    step: int
    kind: JournalKind
    blocks: list[int]
    owner: Owner | None
    first: int | None = None
    last: int | None = None
    form: str = "list"


@dataclass(frozen=True)
class RecordEach:
    """One ``record_each`` call (its lists may be the caller's own, reused and changed after the call)."""

    step: int
    kind: JournalKind
    blocks: list[int]
    owners: list[Owner | None]
    firsts: list[int | None] | None = None
    lasts: list[int | None] | None = None


@dataclass(frozen=True)
class Finish:
    request_id: str
    step: int


@dataclass(frozen=True)
class End:
    """One ``end`` call (a request failed: ended unfinished)."""

    request_id: str
    step: int


Call = Record | RecordEach | Finish | End


# -- the pair under test -----------------------------------------------------------------------------------
def real_kwargs(knobs: dict[str, int]) -> dict[str, int]:
    """``knobs`` (then the never-binding bounds) that ``SlotJournal``'s constructor has; the others dropped, so
    the same parameters run against the journal before and after its rewrite."""
    accepted = inspect.signature(SlotJournal).parameters
    return {k: v for k, v in {**NEVER_BINDS, **knobs}.items() if k in accepted}


class Pair:
    """A real journal and the reference, fed the same calls, with what their observers heard and the step
    of every event recorded (in order: what the real journal's ring must still hold)."""

    def __init__(self, *, block_size: int, n_blocks: int, knobs: dict[str, int]) -> None:
        kwargs = real_kwargs(knobs)
        self.real = SlotJournal(block_size=block_size, **kwargs)
        self.ref = ReferenceJournal(block_size=block_size, **NEVER_BINDS)
        self.capacity = kwargs.get("capacity")
        self.slots = n_blocks * block_size
        self.heard_real: Heard = []
        self.heard_ref: Heard = []
        self.real.add_observer(lambda s, k, b, o: self.heard_real.append((s, k, list(b), o)))
        self.ref.add_observer(lambda s, k, b, o: self.heard_ref.append((s, k, b, o)))
        # a kinds filter, where the real journal's add_observer has one: it hears the reference's calls of those kinds
        self.kinds = frozenset({JournalKind.RELEASED, JournalKind.FREED, JournalKind.QUARANTINED})
        self.heard_filtered: Heard | None = None
        if "kinds" in inspect.signature(self.real.add_observer).parameters:
            filtered: Heard = []
            add: Callable[..., None] = self.real.add_observer
            add(lambda s, k, b, o: filtered.append((s, k, list(b), o)), kinds=self.kinds)
            self.heard_filtered = filtered
        self.event_steps: list[int] = []
        self.request_ids: set[str] = {"never-seen"}
        self.now = 0

    def apply(self, call: Call) -> None:
        self.now = max(self.now, call.step)
        if isinstance(call, Finish):
            self.real.finish(call.request_id, call.step)
            self.ref.finish(call.request_id, call.step)
            self.request_ids.add(call.request_id)
            return
        if isinstance(call, End):
            self.real.end(call.request_id)
            self.ref.end(call.request_id)
            self.request_ids.add(call.request_id)
            return
        if isinstance(call, Record):
            for journal in (self.real, self.ref):
                blocks = call.blocks
                named = (tuple(blocks) if call.form == "tuple"
                         else (b for b in blocks) if call.form == "generator" else list(blocks))
                journal.record(call.step, call.kind, named, call.owner, first_position=call.first,
                               last_position=call.last)
            owners: Sequence[Owner | None] = [call.owner] * len(call.blocks)
        else:
            self.real.record_each(call.step, call.kind, call.blocks, call.owners, call.firsts, call.lasts)
            self.ref.record_each(call.step, call.kind, call.blocks, call.owners, call.firsts, call.lasts)
            owners = call.owners
        self.event_steps.extend([call.step] * len(call.blocks))
        self.request_ids.update(o.id for o in owners if o is not None)

    def must_cover_from(self) -> int | None:
        """The first step whose events are all among the last ``capacity // 2`` recorded (None: every step)."""
        if self.capacity is None or len(self.event_steps) <= self.capacity // 2:
            return None
        at = len(self.event_steps) - self.capacity // 2
        step = self.event_steps[at]
        return step if self.event_steps[at - 1] < step else step + 1

    def check_now(self) -> None:
        """What is cheap to compare often: counts, observers, finishing steps, and every slot's state now."""
        real, ref = self.real, self.ref
        assert real.recorded == ref.recorded
        assert self.heard_real == self.heard_ref
        if self.heard_filtered is not None:
            assert self.heard_filtered == [h for h in self.heard_ref if h[1] in self.kinds]
        for rid in self.request_ids:
            got = real.finished_step(rid)
            assert got == ref.finished_step(rid) and (got is None or type(got) is int), rid
            assert real.ended(rid) is ref.ended(rid), rid
        for slot in range(self.slots):
            q = real.quarantined(slot)
            assert type(q) is bool and q == ref.quarantined(slot), slot
            held = real.holders(slot)
            assert held == ref.holders(slot), slot
            assert all(type(o) is Owner for o in held)

    def check(self, rng: np.random.Generator, slots: Sequence[int] | None = None) -> None:
        """Every answer for every slot: its state now, its history, who held it at a few steps and during a
        few windows (ending now and in the past; from before the first event to after the last); the history
        and the windows for ``slots`` only where given (a stream too long to replay every slot's often)."""
        self.check_now()
        real, ref, now = self.real, self.ref, self.now
        covers: Callable[[int], bool] | None = getattr(real, "covers", None)
        must = self.must_cover_from()
        r1, r2 = (int(s) for s in rng.integers(0, now + 1, size=2))
        edge = () if must is None else (must - 1, must)
        steps = sorted({-1, 0, r1, r2, now, now + 1, *edge})
        windows = sorted({(-1, now), (r1, now), (now, now), *((s, now) for s in edge),
                          *((min(a, b), max(a, b)) for a, b in rng.integers(-1, now + 1, size=(2, 2)).tolist())})
        if covers is not None:
            covered = [covers(s) for s in steps]
            assert covered == sorted(covered), f"covers is not monotone over steps {steps}: {covered}"
            for s, c in zip(steps, covered, strict=True):
                assert c or must is None or s < must, f"step {s} must be covered (the ring's last half starts at {must})"
        for slot in range(self.slots) if slots is None else slots:
            assert real.block_of(slot) == ref.block_of(slot)
            check_history(real.history(slot), ref.history(slot), covers, slot)
            for s in steps:
                check_window(real.owners_at(slot, s), ref.owners_at(slot, s), covers, s, (slot, s))
            for s0, s1 in windows:
                check_window(real.owners_between(slot, s0, s1), ref.owners_between(slot, s0, s1), covers, s0,
                             (slot, s0, s1))


def check_history(got: list[JournalEvent], want: list[JournalEvent], covers: Callable[[int], bool] | None,
                  slot: int) -> None:
    """The same events; with a ring, the newest of them: every one at a covered step, and no other."""
    for e in got:
        assert type(e) is JournalEvent and type(e.step) is int and type(e.block) is int, e
        assert type(e.kind) is JournalKind and (e.owner is None or type(e.owner) is Owner), e
        assert all(p is None or type(p) is int for p in (e.first_position, e.last_position)), e
    window = [e for e in got if not e.carried]
    assert got[len(got) - len(window):] == window, f"slot {slot}: a carried event after the window's first"
    rows, expected = [tuple(e) for e in window], [tuple(e) for e in want]
    if covers is None:
        assert rows == expected[len(expected) - len(rows):], slot
    else:
        assert rows == expected[len(expected) - len(rows):], f"slot {slot}: not the reference's newest events"
        assert len(rows) >= sum(covers(e.step) for e in want), f"slot {slot}: an event at a covered step is missing"
    carried = [(e.kind, e.owner) for e in got if e.carried]
    assert carried == _state_at(want[: len(want) - len(window)]), f"slot {slot}: not its state when the window opens"


def _state_at(before: list[JournalEvent]) -> list[tuple[JournalKind, Owner | None]]:
    """What a window after the reference's events ``before`` carries: each holder then (CACHED for a cache entry,
    SHARED for a request), QUARANTINED when it was, a RELEASED naming nobody when nobody held it (none at all
    when nothing came before)."""
    if not before:
        return []
    held: dict[Owner, None] = {}
    quarantined = False
    for e in before:
        if e.kind in (JournalKind.ALLOCATED, JournalKind.SHARED, JournalKind.WRITTEN, JournalKind.CACHED):
            if e.owner is not None:
                held.setdefault(e.owner)
        elif e.kind is JournalKind.RELEASED and e.owner is not None:
            held.pop(e.owner, None)
        elif e.kind is JournalKind.FREED:
            held.clear()
        elif e.kind in (JournalKind.QUARANTINED, JournalKind.REINSTATED):
            quarantined = e.kind is JournalKind.QUARANTINED
    out: list[tuple[JournalKind, Owner | None]] = [
        (JournalKind.CACHED if o.kind is OwnerKind.CACHE else JournalKind.SHARED, o) for o in held]
    out += [(JournalKind.QUARANTINED, None)] if quarantined else []
    return out + ([(JournalKind.RELEASED, None)] if not held else [])


def check_window(got: list[Owner], want: list[Owner], covers: Callable[[int], bool] | None, first_step: int,
                 where: tuple[int, ...]) -> None:
    """The same owners in the same order; a window the ring does not cover may miss some, never add one."""
    if covers is None or covers(first_step):
        assert got == want, where
    else:
        assert set(got) <= set(want), where


# -- seeded streams ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Regime:
    """A stream's shape: the pool, how many owners and how fast new ones come, how long, how often checked."""

    n_blocks: int
    block_size: int
    owners: int  # requests at the start (the cache owner comes on top)
    calls: int
    check_every: int  # calls between full checks (the state now is compared every check_every // 8 calls)
    fresh: float = 0.0  # chance per call that a new request arrives
    recent: int = 12  # owners a call picks from: the newest ones
    pinned: int = 0  # blocks the cache holds from the first step to the last (never freed, never released by it)
    max_per_call: int = 6
    hot: float = 0.0  # chance that a block a call names is block 0 (a shared prefix's block: a long chain)


def stream(rng: np.random.Generator, r: Regime) -> Iterator[Call]:
    """Random calls: kinds by WEIGHTS, blocks with repeats, steps advancing by 0-3, record and record_each
    mixed; a record_each batch list is sometimes the previous call's, changed in place after that call."""
    step = int(rng.integers(0, 3))
    owners: list[Owner] = [req(i) for i in range(r.owners)]
    made = r.owners
    pinned = list(range(min(r.pinned, r.n_blocks)))
    if pinned:
        yield Record(step, JournalKind.CACHED, pinned, CACHE)
    batch_blocks: list[int] = []
    batch_owners: list[Owner | None] = []

    def pick() -> Owner:
        if not owners or rng.random() < 0.15:
            return CACHE
        return owners[int(rng.integers(max(0, len(owners) - r.recent), len(owners)))]

    def position() -> int | None:
        return None if rng.random() < 0.3 else int(rng.integers(0, 4096))

    for _ in range(r.calls):
        step += int(rng.integers(0, 4))
        if rng.random() < r.fresh:
            owners.append(req(made))
            made += 1
        if rng.random() < 0.06:
            ids = [o.id for o in owners] + ["never-seen"]
            yield (Finish if rng.random() < 0.7 else End)(ids[int(rng.integers(0, len(ids)))], step)
            continue
        kind = KINDS[int(rng.choice(len(KINDS), p=_P))]
        n = int(rng.integers(0, r.max_per_call + 1))
        blocks = [int(b) for b in rng.integers(0, r.n_blocks, size=n)]
        if r.hot:
            blocks = [0 if rng.random() < r.hot else b for b in blocks]
        owner: Owner | None = pick()
        if kind in (JournalKind.FREED, JournalKind.QUARANTINED, JournalKind.REINSTATED) and rng.random() < 0.8:
            owner = None
        elif rng.random() < 0.03:
            owner = None  # an add with no owner: kept, holds nothing
        per: list[Owner | None] = [owner] * n if rng.random() < 0.4 else [pick() for _ in blocks]
        if pinned:  # nothing frees a pinned block, and the cache never lets one go
            kept = [(b, o) for b, o in zip(blocks, per, strict=True)
                    if not (b in pinned and (kind is JournalKind.FREED
                                             or (kind is JournalKind.RELEASED and CACHE in (o, owner))))]
            blocks, per = [b for b, _ in kept], [o for _, o in kept]
        if rng.random() < 0.45:
            writes = kind in (JournalKind.ALLOCATED, JournalKind.WRITTEN) or rng.random() < 0.1
            yield Record(step, kind, blocks, owner, position() if writes else None, position() if writes else None,
                         ("list", "tuple", "generator")[int(rng.integers(0, 3))])
            continue
        firsts: list[int | None] | None = None
        lasts: list[int | None] | None = None
        if kind in (JournalKind.ALLOCATED, JournalKind.WRITTEN) or rng.random() < 0.1:
            firsts = [position() for _ in blocks]
            lasts = [position() for _ in blocks] if rng.random() < 0.5 else list(firsts)
            if rng.random() < 0.2:
                lasts = None
        if batch_owners and rng.random() < 0.3:  # the caller's own lists again, refilled in place
            batch_blocks[:] = blocks
            batch_owners[:] = per
            blocks, per = batch_blocks, batch_owners
        elif rng.random() < 0.3:
            batch_blocks, batch_owners = blocks, per
        yield RecordEach(step, kind, blocks, per, firsts, lasts)


def run_stream(seed: int, r: Regime, knobs: dict[str, int]) -> Pair:
    rng = np.random.default_rng(seed)
    pair = Pair(block_size=r.block_size, n_blocks=r.n_blocks, knobs=knobs)
    for i, call in enumerate(stream(rng, r), 1):
        pair.apply(call)
        if i % r.check_every == 0:
            pair.check(rng)
        elif i % max(1, r.check_every // 8) == 0:
            pair.check_now()
    pair.check(rng)
    return pair


# the real journal's internal sizes (each passed only where its constructor has it): its own, and rings of
# 64 and 256 events (the smallest wraps every few dozen calls)
DEFAULTS = pytest.param({}, id="defaults")
CAP64 = pytest.param({"capacity": 64}, id="cap64")
CAP256 = pytest.param({"capacity": 256}, id="cap256")


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("knobs", [DEFAULTS, CAP64, CAP256])
def test_a_mixed_stream_over_a_small_pool_answers_as_the_reference(seed: int, knobs: dict[str, int]) -> None:
    rng = np.random.default_rng([seed, len(knobs), *knobs.values()])
    r = Regime(n_blocks=int(rng.integers(1, 41)), block_size=(1, 4)[seed], owners=int(rng.integers(0, 12)),
               calls=250, check_every=16)
    tight = {"max_blocks": r.n_blocks} if seed else {}  # as the manager sizes it: the pool's block count
    run_stream(int(rng.integers(1 << 30)), r, {**knobs, **tight})


@pytest.mark.parametrize("knobs", [CAP64, CAP256])
@pytest.mark.parametrize("block_size", [1, 4])
def test_a_long_stream_wraps_a_small_ring_and_answers_as_the_reference(block_size: int, knobs: dict[str, int]) -> None:
    r = Regime(n_blocks=24, block_size=block_size, owners=10, calls=1500, check_every=500, fresh=0.05)
    pair = run_stream(100 + block_size, r, knobs)
    assert pair.real.recorded > 3500  # a 64-event ring wrapped over 50 times


@pytest.mark.parametrize("knobs", [CAP64, CAP256])
def test_hundreds_of_owners_come_and_go_and_every_answer_names_them_as_the_reference(knobs: dict[str, int]) -> None:
    r = Regime(n_blocks=16, block_size=1, owners=1, calls=2500, check_every=500, fresh=0.6, recent=8)
    pair = run_stream(200, r, knobs)
    assert len(pair.request_ids) > 1000


@pytest.mark.parametrize("block_size", [1, 4])
def test_a_block_the_cache_holds_all_along_keeps_it_while_requests_come_and_go(block_size: int) -> None:
    r = Regime(n_blocks=8, block_size=block_size, owners=4, calls=1500, check_every=500, fresh=0.2, pinned=3)
    pair = run_stream(300 + block_size, r, {"capacity": 64})
    for slot in range(3 * block_size):  # held since the first step: by the cache, whatever else came and went
        assert CACHE in pair.real.holders(slot)
        assert CACHE in pair.real.owners_at(slot, pair.now)


def test_more_owners_than_an_intern_table_keeps_unswept_are_named_as_the_reference() -> None:
    """70 000 requests, 64 a step, each allocated a block for a step then released (a decode batch turning over
    every step), while the cache holds block 0 throughout: past 1 << 16 distinct owners, where a bounded intern
    table must sweep the codes nothing names any more (and keep every one still named)."""
    n_blocks, batch = 40, 64
    rng = np.random.default_rng(400)
    pair = Pair(block_size=1, n_blocks=n_blocks, knobs={"capacity": 256, "max_blocks": n_blocks})
    pair.apply(Record(0, JournalKind.CACHED, [0], CACHE))
    previous: tuple[list[int], list[Owner | None]] = ([], [])
    for step in range(1, 70_000 // batch + 2):
        blocks = rng.integers(1, n_blocks, size=batch).tolist()
        owners: list[Owner | None] = [req(f"{step}.{i}") for i in range(batch)]
        pair.apply(RecordEach(step, JournalKind.RELEASED, *previous))
        pair.apply(RecordEach(step, JournalKind.ALLOCATED, blocks, owners))
        if step % 7 == 0:
            pair.apply(Record(step, JournalKind.FREED, rng.integers(1, n_blocks, size=3).tolist(), None))
        previous = (blocks, owners)
        if step == (1 << 16) // batch + 8:  # just past the 65 536th owner
            pair.check_now()
    pair.check(rng, slots=[0, 1, int(rng.integers(2, n_blocks))])
    assert len(pair.request_ids) > 1 << 16
    assert pair.real.holders(0)[0] == CACHE


@pytest.mark.parametrize("knobs", [CAP64, CAP256])
def test_a_token_granular_decode_pool_folds_the_short_way_and_answers_as_the_reference(
        knobs: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool of one-slot blocks whose every decode token takes a fresh slot from a free list (the demo engine's
    steady decode): chunks of ALLOCATED events, each block once, fold the short way (``BlockBase._fold_lone``);
    requests that finish release and free their slots, a few slots are allocated again to their own request or
    shared, and those chunks fold the general way. Both ways answer as the reference."""
    from kvcanary.guard import journal_base

    taken: list[bool] = []
    lone = journal_base.BlockBase._fold_lone

    def counted(self: journal_base.BlockBase, *args: npt.NDArray[np.int64]) -> bool:
        took = lone(self, *args)  # type: ignore[arg-type]
        taken.append(took)
        return took
    monkeypatch.setattr(journal_base.BlockBase, "_fold_lone", counted)
    n_blocks, batch = 512, 8
    rng = np.random.default_rng(600 + len(knobs))
    pair = Pair(block_size=1, n_blocks=n_blocks, knobs={**knobs, "max_blocks": n_blocks})
    free = [int(b) for b in rng.permutation(n_blocks)]
    live: dict[int, list[int]] = {}  # request -> its slots
    made = 0
    for step in range(1, 700):
        while len(live) < batch:
            live[made] = []
            made += 1
        rids = list(live)
        blocks = [free.pop(0) for _ in rids]
        for rid, b in zip(rids, blocks, strict=True):
            live[rid].append(b)
        positions: list[int | None] = [len(live[rid]) - 1 for rid in rids]
        pair.apply(RecordEach(step, JournalKind.ALLOCATED, blocks, [req(rid) for rid in rids], positions, positions))
        if step % 23 == 0:  # a request's own slot allocated to it again (a rewrite), one shared with another
            rid = rids[0]
            pair.apply(Record(step, JournalKind.ALLOCATED, [live[rid][0]], req(rid)))
            pair.apply(Record(step, JournalKind.SHARED, [live[rid][-1]], req(rids[1])))
        if rng.random() < 0.3:  # a request finishes: released, then freed back to the free list
            rid = rids[int(rng.integers(0, len(rids)))]
            slots = live.pop(rid)
            holders = [req(rid), *([req(rids[1])] if step % 23 == 0 and rid == rids[0] else [])]
            for owner in holders:
                pair.apply(Record(step, JournalKind.RELEASED, slots, owner))
            pair.apply(Record(step, JournalKind.FREED, slots, None))
            pair.apply(Finish(f"r{rid}", step))
            free.extend(slots)
        if step % 100 == 0:
            pair.check(rng, slots=[int(b) for b in rng.integers(0, n_blocks, size=24)])
        elif step % 10 == 0:
            pair.check_now()
    pair.check(rng, slots=[int(b) for b in rng.integers(0, n_blocks, size=64)])
    assert taken.count(True) >= 20 and taken.count(False) >= 5, (taken.count(True), taken.count(False))


class _SmallCodes(OwnerCodes):
    """An owner table rebuilt past 32 owners (the journal's waits for 65,536), counting its rebuilds."""

    made: ClassVar[list[_SmallCodes]] = []

    def __init__(self) -> None:
        super().__init__(floor=32)
        self.rebuilds = 0
        _SmallCodes.made.append(self)

    def rebuild(self, live: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
        self.rebuilds += 1
        return super().rebuild(live)


@pytest.mark.parametrize("memo_min", [1, 8])
@pytest.mark.parametrize("knobs", [CAP64, CAP256])
def test_a_hot_block_read_from_its_memo_answers_as_the_reference(knobs: dict[str, int], memo_min: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Half the events name block 0 and the state is read every few calls, so its memo (every block's, at
    ``memo_min=1``) is brought up to date from a few events at a time, across ring wraps (a memo whose events
    were folded: replayed from the base) and owner-table rebuilds (every memo dropped)."""
    monkeypatch.setattr(journal_module, "MEMO_MIN", memo_min)
    monkeypatch.setattr(journal_module, "OwnerCodes", _SmallCodes)
    _SmallCodes.made.clear()
    r = Regime(n_blocks=10, block_size=2, owners=6, calls=1500, check_every=48, fresh=0.3, hot=0.5)
    pair = run_stream(500 + memo_min, r, knobs)
    (codes,) = [c for c in _SmallCodes.made if c is pair.real._codes]
    assert codes.rebuilds >= 3 and pair.real.recorded > 10 * pair.real.capacity
    assert pair.real._memos, "no block kept a memo"


# -- a Hypothesis strategy: short streams over a tiny pool --------------------------------------------------
_OWNERS = st.sampled_from([None, CACHE, req(0), req(1), req(2)])
_POS = st.one_of(st.none(), st.integers(0, 64))


@st.composite
def calls(draw: st.DrawFn) -> tuple[int, int, list[Call]]:
    """(block size, blocks in the pool, calls)."""
    block_size = draw(st.sampled_from([1, 4]))
    n_blocks = draw(st.integers(1, 6))
    block = st.integers(0, n_blocks - 1)
    out: list[Call] = []
    step = 0
    for _ in range(draw(st.integers(0, 60))):
        step += draw(st.integers(0, 3))
        what = draw(st.integers(0, 9))
        kind = draw(st.sampled_from(KINDS))
        if what == 0:
            rid = draw(st.sampled_from(["r0", "r1", "r2"]))
            out.append(Finish(rid, step) if draw(st.booleans()) else End(rid, step))
        elif what <= 4:
            out.append(Record(step, kind, draw(st.lists(block, max_size=5)), draw(_OWNERS), draw(_POS), draw(_POS),
                              draw(st.sampled_from(["list", "tuple", "generator"]))))
        else:
            blocks = draw(st.lists(block, max_size=6))
            n = len(blocks)
            pos = st.one_of(st.none(), st.lists(_POS, min_size=n, max_size=n))
            out.append(RecordEach(step, kind, blocks, draw(st.lists(_OWNERS, min_size=n, max_size=n)), draw(pos),
                                  draw(pos)))
    return block_size, n_blocks, out


@settings(max_examples=40, deadline=None)
@given(calls(), st.sampled_from([{}, {"capacity": 64}]), st.booleans())
def test_any_short_stream_answers_as_the_reference(drawn: tuple[int, int, list[Call]], knobs: dict[str, int],
                                                   tight: bool) -> None:
    block_size, n_blocks, out = drawn
    pair = Pair(block_size=block_size, n_blocks=n_blocks, knobs={**knobs, "max_blocks": n_blocks} if tight else knobs)
    rng = np.random.default_rng(len(out))
    for i, call in enumerate(out, 1):
        pair.apply(call)
        if i % 5 == 0:
            pair.check(rng)
    pair.check(rng)

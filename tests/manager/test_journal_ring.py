"""The slot journal's memory model: a bounded ring of events, and who holds each block beyond it.

A block allocated long ago (its events overwritten) to a request still live is still attributed and isolated
to that request; a shared block keeps all its holders; a freed and reallocated block names only its new
holder; quarantine survives the ring; memory does not grow; bad arguments are refused by name. A parity test
replays random event streams through a plain reference model (lists of events per block) and compares every
query for the blocks whose events are all still kept.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from kvcanary.consts import CanaryLaunchTag
from kvcanary.guard import JournalEvent, JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.guard.policy import Isolation
from kvcanary.manager import ViolationEvent
from kvcanary.violations import Violation

CACHE = Owner(OwnerKind.CACHE, "radix")


def req(rid: str) -> Owner:
    return Owner(OwnerKind.REQUEST, rid)


def _churn(j: SlotJournal, first_step: int, steps: int, *, blocks_from: int = 1000) -> int:
    """``steps`` decode steps of 8 other requests, each a fresh block a step, freed and reused: enough events to
    push everything before them off the ring. Returns the next step."""
    rids = np.arange(100, 108, dtype=np.int64)
    for s in range(first_step, first_step + steps):
        blocks = blocks_from + rids - 100 + 8 * (s % 4)
        pos = np.full(8, s, dtype=np.int64)
        j.record_columns(s, JournalKind.ALLOCATED, blocks, rids, pos, pos)
        j.record_columns(s, JournalKind.RELEASED, blocks, rids)
        j.record_columns(s, JournalKind.FREED, blocks)
    return first_step + steps


def _violation_at(slot: int, step: int, read_back: int) -> ViolationEvent:
    v = Violation(kernel_kind=int(CanaryLaunchTag.HEAD_K_FULL), slot_idx=slot, position=0, stored_token=1,
                  expected_token=2, stored_chain_hash=0, expected_aux=0, fail_reason_bits=1)
    return ViolationEvent(v, "corrupt", 0, step, read_back)


def test_a_long_held_block_is_attributed_and_isolated_to_its_request_after_its_events_fell_off() -> None:
    j = SlotJournal(block_size=4, capacity=64)
    j.record(1, JournalKind.ALLOCATED, [3], req("7"), first_position=0, last_position=3)
    j.record(2, JournalKind.ALLOCATED, [5], req("long-lived"))
    step = _churn(j, 3, 40)
    assert j.history(12) == [] and j.history(20) == []  # its events are gone
    assert j.holders(12) == [req("7")] and j.holders(20) == [req("long-lived")]
    assert j.owners_at(13, step - 1) == [req("7")] and j.owners_between(20, 10, step) == [req("long-lived")]
    assert j.holds(12, req("7")) and not j.holds(12, req("100"))
    d = Isolation(j, SlotJournal(block_size=4)).decide([_violation_at(13, step - 5, step)], step)
    assert [f.request_id for f in d.fail] == ["7"] and d.quarantine == (3,)


def test_a_shared_block_keeps_every_holder_after_its_events_fell_off() -> None:
    j = SlotJournal(block_size=1, capacity=32)
    j.record(1, JournalKind.ALLOCATED, [9], req("1"))
    j.record(1, JournalKind.CACHED, [9], CACHE)
    j.record(2, JournalKind.SHARED, [9], req("2"))
    j.record(3, JournalKind.SHARED, [9], req("3"))
    j.record(4, JournalKind.RELEASED, [9], req("1"))
    step = _churn(j, 5, 20)
    assert j.history(9) == []
    assert set(j.holders(9)) == {CACHE, req("2"), req("3")}
    assert set(j.owners_at(9, step)) == {CACHE, req("2"), req("3")}
    assert j.holder_classes(np.array([9], dtype=np.int64)).tolist() == [2]  # requests hold it
    j.record(step, JournalKind.RELEASED, [9], req("2"))
    j.record(step, JournalKind.RELEASED, [9], req("3"))
    assert j.holders(9) == [CACHE] and j.holder_classes(np.array([9], dtype=np.int64)).tolist() == [1]
    d = Isolation(j, SlotJournal(block_size=1)).decide([_violation_at(9, step, step)], step)
    assert {f.request_id for f in d.fail} == {"2", "3"}  # released during the step: they held it in it
    d = Isolation(j, SlotJournal(block_size=1)).decide([_violation_at(9, step + 1, step + 1)], step + 1)
    assert d.fail == () and d.quarantine == ()  # quarantined already; the cache is no request: nothing to fail


def test_a_block_freed_and_reallocated_after_wraparound_names_only_its_new_holder() -> None:
    j = SlotJournal(block_size=1, capacity=16)
    j.record(1, JournalKind.ALLOCATED, [4], req("old"))
    j.record(2, JournalKind.RELEASED, [4], req("old"))
    j.record(2, JournalKind.FREED, [4])
    step = _churn(j, 3, 10)
    j.record(step, JournalKind.ALLOCATED, [4], req("new"))
    assert [e.owner for e in j.history(4)] == [req("new")]
    assert j.holders(4) == [req("new")] and j.owners_at(4, step) == [req("new")]
    step = _churn(j, step + 1, 10)  # the new allocation falls off too
    assert j.history(4) == [] and j.holders(4) == [req("new")]
    assert j.owners_between(4, 0, step) == [req("new")]


def test_quarantine_outlives_the_ring() -> None:
    j = SlotJournal(block_size=2, capacity=8)
    j.record(1, JournalKind.QUARANTINED, [3])
    j.record(1, JournalKind.QUARANTINED, [4])
    j.record(2, JournalKind.REINSTATED, [4])
    _churn(j, 3, 10, blocks_from=100)
    assert j.history(6) == [] and j.quarantined(6) and j.quarantined(7)
    assert not j.quarantined(8) and not j.quarantined(5) and not j.quarantined(10**6)


def test_memory_does_not_grow_over_100k_steps() -> None:
    j = SlotJournal(block_size=1, capacity=4096)
    rids = np.arange(64, dtype=np.int64)
    sizes = []
    for s in range(100_000):
        blocks = rids + 64 * (s % 16)  # a pool of 1024 one-slot blocks, reused
        j.record_columns(s, JournalKind.ALLOCATED, blocks, rids + 64 * (s // 256), blocks, blocks)
        if s % 256 == 255:  # the batch finishes: released and freed, a new batch of request ids comes
            every = np.arange(1024, dtype=np.int64)
            j.record_columns(s, JournalKind.RELEASED, every, rids.repeat(16) + 64 * (s // 256))
            j.record_columns(s, JournalKind.FREED, every)
            j.record(s, JournalKind.CACHED, [s % 1024], Owner(OwnerKind.CACHE, f"entry-{s}"))  # interned owners
        if s % 25_000 == 0 or s == 99_999:
            sizes.append((j._step.nbytes + j._block.nbytes + j._now.req.one.nbytes + j._base.cache.one.nbytes,
                          sum(len(h.more) for st in (j._now, j._base) for h in (st.req, st.cache)), len(j._named),
                          len(j._finished)))
    assert j.recorded > 6_000_000 and j.recorded - j._folded <= j.capacity
    assert len({s[0] for s in sizes}) == 1, sizes  # the columns and the dense state: sized once
    assert all(m <= 1024 and named <= j.max_owners for _, m, named, _ in sizes), sizes
    assert j.holders(0) and j.history(0)


def test_interned_owners_are_bounded_and_the_least_recently_named_go_first() -> None:
    j = SlotJournal(block_size=1, max_owners=2)
    a, b, c = (Owner(OwnerKind.CACHE, x) for x in "abc")
    j.record(1, JournalKind.CACHED, [1], a)
    j.record(1, JournalKind.CACHED, [2], b)
    j.record(2, JournalKind.CACHED, [1], a)  # a named again: b is now the least recently named
    j.record(3, JournalKind.CACHED, [3], c)
    assert j.holders(1) == [a] and j.holders(3) == [c] and j.holders(2) == []  # b forgotten: no owner
    assert j.owner_code(req("12")) == 12 and j.owner_of(12) == req("12")  # an integer request id is its code
    assert j.owner_code(req("012")) < 0 and j.owner_code(req("x")) < 0  # others are interned


def test_bad_arguments_are_refused_by_name() -> None:
    for bad in ({"capacity": 0}, {"max_blocks": -1}, {"max_owners": True}, {"max_finished": 0}):
        name = next(iter(bad))
        with pytest.raises(ValueError, match=name):
            SlotJournal(block_size=1, **bad)
    j = SlotJournal(block_size=1, max_blocks=100)
    with pytest.raises(ValueError, match=r"blocks must be in \[0, max_blocks=100\) \(got 100\)"):
        j.record_columns(1, JournalKind.ALLOCATED, [5, 100], req("1"))
    with pytest.raises(ValueError, match=r"got -3"):
        j.record_columns(1, JournalKind.ALLOCATED, np.array([-3, 5]), req("1"))
    with pytest.raises(ValueError, match="owners must be as long as blocks"):
        j.record_columns(1, JournalKind.ALLOCATED, [1, 2], [7])
    with pytest.raises(ValueError, match="lasts must be as long as blocks"):
        j.record_columns(1, JournalKind.ALLOCATED, [1, 2], [7, 7], [0, 1], [0])
    with pytest.raises(ValueError, match="blocks must be one-dimensional"):
        j.record_columns(1, JournalKind.ALLOCATED, np.zeros((2, 2), dtype=np.int64), req("1"))
    assert j.recorded == 0 and j.history(5) == []  # nothing was filed by a refused call


def test_a_call_larger_than_the_ring_keeps_its_newest_events() -> None:
    j = SlotJournal(block_size=1, capacity=8)
    j.record_columns(1, JournalKind.ALLOCATED, np.arange(20, dtype=np.int64), np.arange(20, dtype=np.int64) + 1)
    assert j.recorded == 20 and j.history(3) == [] and [e.owner for e in j.history(19)] == [req("20")]
    assert all(j.holders(b) == [req(str(b + 1))] for b in range(20))


# -- parity with a plain reference model -----------------------------------------------------------------
class Reference:
    """The journal's meaning, kept the plain way: every event in a list per block, forever."""

    def __init__(self) -> None:
        self.events: dict[int, list[JournalEvent]] = {}

    def record(self, step: int, kind: JournalKind, blocks: list[int], owners: list[Owner | None],
               firsts: list[int | None], lasts: list[int | None]) -> None:
        for b, o, f, la in zip(blocks, owners, firsts, lasts, strict=True):
            self.events.setdefault(b, []).append(JournalEvent(step, kind, b, o, f, la))

    def holders(self, block: int) -> list[Owner]:
        held: dict[Owner, None] = {}
        for e in self.events.get(block, []):
            if e.kind in (JournalKind.ALLOCATED, JournalKind.SHARED, JournalKind.CACHED, JournalKind.WRITTEN):
                if e.owner is not None:
                    held[e.owner] = None
            elif e.kind is JournalKind.RELEASED and e.owner is not None:
                held.pop(e.owner, None)
            elif e.kind is JournalKind.FREED:
                held.clear()
        return list(held)

    def owners_between(self, block: int, first: int, last: int) -> list[Owner]:
        held: dict[Owner, None] = {}
        out: dict[Owner, None] = {}
        for e in self.events.get(block, []):
            if e.step > last:
                break
            if e.step >= first:
                out.update(held)
            if e.kind in (JournalKind.ALLOCATED, JournalKind.SHARED, JournalKind.CACHED, JournalKind.WRITTEN):
                if e.owner is not None:
                    held[e.owner] = None
                    if e.step >= first:
                        out[e.owner] = None
            elif e.step < first and e.kind is JournalKind.RELEASED and e.owner is not None:
                held.pop(e.owner, None)
            elif e.step < first and e.kind is JournalKind.FREED:
                held.clear()
        out.update(held)
        return list(out)


_OWNERS = [req("1"), req("2"), req("33"), req("rq-x"), CACHE, Owner(OwnerKind.CACHE, "other"), None]


@pytest.mark.parametrize("seed", range(6))
def test_random_streams_answer_like_the_reference_for_every_fully_kept_block(seed: int) -> None:
    rng = random.Random(seed)
    j = SlotJournal(block_size=2, capacity=rng.choice([64, 256, 4096]))
    ref = Reference()
    kinds = list(JournalKind)
    for step in range(300):
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(kinds)
            n = rng.randint(1, 6)
            blocks = [rng.randrange(12) for _ in range(n)]
            owners = [rng.choice(_OWNERS) for _ in range(n)] if rng.random() < 0.5 else [rng.choice(_OWNERS)] * n
            with_pos = rng.random() < 0.5
            firsts: list[int | None] = [rng.randrange(100) for _ in range(n)] if with_pos else [None] * n
            lasts: list[int | None] = [f + 1 if f is not None else None for f in firsts]
            if len(set(owners)) == 1 and rng.random() < 0.5:
                j.record(step, kind, blocks, owners[0], first_position=firsts[0], last_position=lasts[0])
                firsts, lasts = [firsts[0]] * n, [lasts[0]] * n
            else:
                j.record_each(step, kind, blocks, owners, firsts, lasts)
            ref.record(step, kind, blocks, owners, firsts, lasts)
        if step % 37 == 0 or step == 299:
            for b in range(12):
                slot = 2 * b + rng.randrange(2)
                kept = j.history(slot)
                assert kept == ref.events.get(b, [])[len(ref.events.get(b, [])) - len(kept):], (seed, step, b)
                assert set(j.holders(slot)) == set(ref.holders(b)), (seed, step, b)  # the state beyond the ring
                if len(kept) == len(ref.events.get(b, [])):  # every event of the block is kept: the same lists
                    assert j.holders(slot) == ref.holders(b), (seed, step, b)
                    for lo in range(0, step + 1, 23):
                        assert j.owners_between(slot, lo, step) == ref.owners_between(b, lo, step), (seed, b, lo)
                        assert j.owners_at(slot, lo) == ref.owners_between(b, lo, lo), (seed, b, lo)
                quarantined = next((e.kind is JournalKind.QUARANTINED for e in reversed(ref.events.get(b, []))
                                    if e.kind in (JournalKind.QUARANTINED, JournalKind.REINSTATED)), False)
                assert j.quarantined(slot) == quarantined, (seed, step, b)
                if step < 148:  # the state of now is made when first asked: after the ring wrapped
                    continue
                want = ref.holders(b)
                cls = 0 if not want else 1 if all(o.kind is OwnerKind.CACHE for o in want) else 2
                assert j.holder_classes(np.array([b], dtype=np.int64)).tolist() == [cls], (seed, step, b)

"""The slot journal's ring, fold and owner table, in small capacities: what leaves the ring keeps every answer
about who holds a block, a window the ring covers stays exact, and no owner code ever dangles."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from kvcanary.guard import JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.guard.journal_events import ADD_CODES, KINDS

K = JournalKind


def req(rid: str) -> Owner:
    return Owner(OwnerKind.REQUEST, rid)


def filler(j: SlotJournal, step: int, n: int, block: int) -> None:
    """``n`` events on ``block`` (an unrelated one), to push older events out of the ring."""
    for _ in range(n):
        j.record(step, K.WRITTEN, [block], req("filler"))


def test_the_add_kinds_are_the_first_codes() -> None:
    assert set(KINDS[:ADD_CODES]) == {K.ALLOCATED, K.SHARED, K.WRITTEN, K.CACHED}


def test_journal_ring_wraps_folds_and_keeps_holders_exact() -> None:
    j = SlotJournal(block_size=2, capacity=16, per_block=4)
    j.record(1, K.ALLOCATED, [0], req("a"))
    j.record(2, K.SHARED, [0], req("b"))
    j.record(3, K.QUARANTINED, [1])
    assert j.covers(0)
    filler(j, 4, 40, 5)  # the ring holds 16 events: these fold the first three
    assert not j.covers(3) and j.covers(5)
    assert j.holders(1) == [req("a"), req("b")] and j.quarantined(2)
    # every event of block 0 folded: its history is its state, carried (a holder at the step it joined)
    assert [(e.step, e.kind, e.owner, e.carried) for e in j.history(0)] == [
        (1, K.SHARED, req("a"), True), (2, K.SHARED, req("b"), True)]
    window = [e for e in j.history(10) if not e.carried]
    assert len(window) == 4  # per_block: the newest four of the block's events in the ring
    assert [e.carried for e in j.history(10)][:-4] == [True]  # led by its state when they begin
    j.record(6, K.RELEASED, [0], req("a"))
    j.record(6, K.REINSTATED, [1])
    assert j.holders(0) == [req("b")] and not j.quarantined(3)
    filler(j, 7, 40, 5)
    assert j.holders(0) == [req("b")] and not j.quarantined(3) and j.recorded == 85


def test_journal_window_inside_the_ring_is_exact() -> None:
    j = SlotJournal(block_size=1, capacity=16)
    filler(j, 0, 30, 3)
    j.record(10, K.ALLOCATED, [1], req("a"))
    j.record(11, K.RELEASED, [1], req("a"))
    j.record(11, K.FREED, [1])
    j.record(12, K.ALLOCATED, [1], req("b"))
    filler(j, 13, 4, 3)
    assert j.covers(10)
    # a came and left inside the window: still named, before b (the order they took the block)
    assert j.owners_between(1, 10, 13) == [req("a"), req("b")]
    filler(j, 14, 16, 3)  # now a's events are folded: the window reaches past the ring
    assert not j.covers(10) and j.owners_between(1, 10, 13) == [req("b")] and j.owners_between(1, 12, 13) == [req("b")]


def test_journal_holder_released_twice_in_one_folded_run_is_gone() -> None:
    j = SlotJournal(block_size=1, capacity=16)
    for step, kind, owner in ((1, K.ALLOCATED, "a"), (2, K.RELEASED, "a"), (3, K.SHARED, "a"), (4, K.RELEASED, "a")):
        j.record(step, kind, [0], req(owner))
    j.record(5, K.ALLOCATED, [0], req("b"))
    filler(j, 6, 40, 2)
    assert not j.covers(5)
    assert j.holders(0) == [req("b")] and j.owners_between(0, 5, 9) == [req("b")]
    j.record(10, K.RELEASED, [0], req("b"))
    assert j.holders(0) == []


def test_journal_past_window_never_names_a_later_holder() -> None:
    j = SlotJournal(block_size=1, capacity=16)
    j.record(10, K.ALLOCATED, [0], req("a"))
    j.record(20, K.SHARED, [0], req("b"))
    j.record(30, K.ALLOCATED, [1], req("c"))
    filler(j, 31, 40, 2)
    assert [(e.step, e.owner) for e in j.history(0)] == [(10, req("a")), (20, req("b"))]  # carried: folded
    assert [(e.step, e.owner, e.carried) for e in j.history(1)] == [(30, req("c"), True)]
    assert j.owners_at(0, 5) == [] and j.owners_at(0, 15) == [req("a")] and j.owners_at(0, 25) == [req("a"), req("b")]
    assert j.owners_between(1, 0, 29) == [] and j.owners_at(1, 30) == [req("c")]


def test_journal_keeps_join_order_through_folds() -> None:
    j = SlotJournal(block_size=1, capacity=16)
    for rid in "cab":
        j.record(1, K.SHARED, [0], req(rid))
    j.record(2, K.RELEASED, [0], req("c"))
    j.record(3, K.WRITTEN, [0], req("a"))  # a holds it already: stays where it was
    j.record(3, K.SHARED, [0], req("c"))  # c took it again: last now
    order = [req("a"), req("b"), req("c")]
    assert j.holders(0) == order
    filler(j, 4, 40, 2)
    assert not j.covers(3) and j.holders(0) == order and j.owners_at(0, 9) == order
    j.record(10, K.RELEASED, [0], req("b"))
    assert j.holders(0) == [req("a"), req("c")]


def test_journal_owner_table_rebuild_keeps_every_named_owner() -> None:
    j = SlotJournal(block_size=1, capacity=32)
    j._codes.floor = j._codes.rebuild_at = 8  # rebuild after a few owners instead of 65536
    j.record(0, K.ALLOCATED, [0], req("keeper"))
    j.record(0, K.SHARED, [1], req("keeper"))
    for i in range(200):  # short-lived owners, each on block 2 and gone: the table drops them
        j.record(i, K.ALLOCATED, [2], req(f"t{i}"))
        j.record(i, K.RELEASED, [2], req(f"t{i}"))
        j.record(i, K.FREED, [2])
    assert len(j._codes) < 40  # rebuilt: far fewer than the 201 owners ever seen
    assert j.holders(0) == [req("keeper")] and j.holders(1) == [req("keeper")]  # not read as "no owner"
    j.record(300, K.RELEASED, [0], req("keeper"))  # its release after a rebuild leaves nobody holding it
    assert j.holders(0) == [] and j.holders(1) == [req("keeper")] and j.holders(2) == []
    j.record(301, K.ALLOCATED, [3], req("t0"))  # dropped long ago, interned again under a new code
    assert j.holders(3) == [req("t0")] and j.owners_at(3, 301) == [req("t0")]
    j.record(302, K.RELEASED, [3], req("t0"))
    assert j.holders(3) == [] and j.covers(199) and j.owners_at(2, 199) == [req("t199")]
    assert not j.covers(0) and j.owners_at(2, 0) == []  # t0's first stay was folded away: came and left


def test_journal_rebuild_keeps_the_cached_owner_list_right() -> None:
    j = SlotJournal(block_size=1, capacity=32)
    j._codes.floor = j._codes.rebuild_at = 4
    batch = [req("x"), req("y")]
    j.record_each(0, K.ALLOCATED, [0, 1], batch)  # cached: the same list again maps no owner
    for i in range(50):
        j.record(i, K.ALLOCATED, [5], req(f"t{i}"))
        j.record(i, K.FREED, [5])
    j.record_each(60, K.SHARED, [2, 3], batch)  # the cached codes were renumbered with the table
    assert j.holders(2) == [req("x")] and j.holders(3) == [req("y")]
    batch[0] = req("z")  # the caller's list changed in place: its owners are looked up again
    j.record_each(61, K.SHARED, [4, 6], batch)
    assert j.holders(4) == [req("z")] and j.holders(6) == [req("y")]


def test_journal_owner_ids_are_never_codes() -> None:
    j = SlotJournal(block_size=1, capacity=16)
    odd = [req("-1"), req("-2"), req("0"), Owner(OwnerKind.CACHE, "0")]
    j.record_each(0, K.SHARED, [0, 0, 0, 0], odd)
    filler(j, 1, 40, 1)
    assert j.holders(0) == odd
    with pytest.raises(TypeError, match="record_each: owners must be Owners or None"):
        j.record_each(2, K.ALLOCATED, [3], [7])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="record: owner must be an Owner or None"):
        j.record(2, K.ALLOCATED, [3], -1)  # type: ignore[arg-type]
    assert j.holders(3) == [] and j.recorded == 44


def test_journal_refuses_bad_input_and_records_nothing() -> None:
    j = SlotJournal(block_size=1, max_blocks=100, capacity=16)
    j.record_each(0, K.ALLOCATED, [1], [req("a")], [0], [0])
    cases: list[tuple[Callable[[], object], str]] = [
            (lambda: j.record_each(1, K.WRITTEN, [1, 100], [req("a")] * 2), r"blocks must be block ids in \[0, "
                                                                             r"max_blocks=100\), got 100"),
            (lambda: j.record(1, K.WRITTEN, [-3], req("a")), r"blocks must be block ids .* got -3"),
            (lambda: j.record(1, K.WRITTEN, ["2"], req("a")), r"blocks must be block ids .* got '2'"),  # type: ignore[list-item]
            (lambda: j.record_each(1, K.WRITTEN, [1], [req("a")], [-1], [2]), r"firsts must be positions"),
            (lambda: j.record_each(1, K.WRITTEN, [1], [req("a")], [1], ["x"]), r"lasts must be ints or None"),  # type: ignore[list-item]
            (lambda: j.record(1, "written", [1], req("a")), r"kind must be a JournalKind"),  # type: ignore[arg-type]
            (lambda: j.record(1.5, K.WRITTEN, [1], req("a")), r"step must be an int")]  # type: ignore[arg-type]
    for call, match in cases:
        with pytest.raises((ValueError, TypeError), match=match):
            call()
    assert j.recorded == 1 and [(e.step, e.first_position) for e in j.history(1)] == [(0, 0)]
    j.record_each(2, K.WRITTEN, [1, 2], [req("a"), None], [None, 5], [None, 7])  # None: no position
    assert [(e.first_position, e.last_position) for e in j.history(1)][-1] == (None, None)
    assert (j.history(2)[0].owner, j.history(2)[0].first_position, j.history(2)[0].last_position) == (None, 5, 7)


def test_journal_observers_hear_only_their_kinds() -> None:
    j = SlotJournal(block_size=1)
    heard: list[tuple[JournalKind, list[int]]] = []
    j.add_observer(lambda step, kind, blocks, owner: heard.append((kind, blocks)), kinds=(K.RELEASED, K.FREED))
    j.record_each(0, K.ALLOCATED, [1, 2], [req("a"), req("b")])
    j.record(1, K.RELEASED, [1, 2], req("a"))
    j.record_each(2, K.FREED, [1, 2], [None, None])
    assert heard == [(K.RELEASED, [1, 2]), (K.FREED, [1, 2])]


@pytest.mark.parametrize("seed", range(6))
def test_journal_folding_changes_no_answer_the_ring_covers(seed: int) -> None:
    """A small ring (folding all the time) against a ring that never folds, over a random event stream: the
    holders and quarantine always agree, a window the small one covers too, its history is the newest part."""
    rng = random.Random(seed)
    small = SlotJournal(block_size=1, capacity=16, per_block=1 << 20)
    small._codes.floor = small._codes.rebuild_at = 4
    whole = SlotJournal(block_size=1, per_block=1 << 20)
    owners = [None, *(req(str(i)) for i in range(5)), Owner(OwnerKind.CACHE, "c")]
    weights = (6, 2, 4, 1, 4, 3, 0.3, 0.3)
    step = 0
    for _ in range(600):
        step += rng.choice((0, 1, 1, 2))
        kind = rng.choices(list(K), weights)[0]
        n = rng.randint(1, 5)
        blocks = [rng.randrange(6) for _ in range(n)]
        who = [rng.choice(owners) for _ in range(n)]
        pos = [rng.choice((None, rng.randrange(99))) for _ in range(n)]
        for j in (small, whole):
            j.record_each(step, kind, blocks, who, pos, pos)
        for b in range(6):
            assert small.holders(b) == whole.holders(b) and small.quarantined(b) == whole.quarantined(b)
            mine = [e for e in small.history(b) if not e.carried]
            all_ = [e for e in whole.history(b) if not e.carried]
            assert mine == all_[len(all_) - len(mine):]
            s0 = rng.randint(0, step)
            s1 = rng.randint(s0, step + 1)
            if small.covers(s0):
                assert small.owners_between(b, s0, s1) == whole.owners_between(b, s0, s1)
            else:
                assert set(small.owners_between(b, s0, s1)) <= set(whole.owners_between(b, s0, s1))
    assert not small.covers(0) and whole.covers(0)

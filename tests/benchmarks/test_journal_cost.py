"""journal_cost's feeds: what each records per decode step (the events its figure and its floor stand for).

Only what the script decides is checked: its figures are measured, never asserted here."""

from __future__ import annotations

from benchmarks import journal_cost
from kvcanary.guard.journal import JournalKind, Owner, SlotJournal


def _kinds(feed: journal_cost.JournalFeed, *, bs: int, block: int, steps: int) -> list[list[JournalKind]]:
    journal = SlotJournal(block_size=block)
    heard: list[list[JournalKind]] = []
    journal.add_observer(lambda step, kind, blocks, owner: heard[step].extend([kind] * len(blocks)))
    for s in range(steps):
        heard.append([])
        feed(journal, s, bs, block)
    return heard


def test_the_transformers_feed_records_an_allocation_per_request_on_a_new_block_only() -> None:
    heard = _kinds(journal_cost.allocated_step_feed, bs=3, block=4, steps=9)
    assert [len(h) for h in heard] == [3, 0, 0, 0, 3, 0, 0, 0, 3]
    assert {k for h in heard for k in h} == {JournalKind.ALLOCATED}


def test_the_demo_engines_feed_records_an_allocation_with_its_position_per_request_on_a_new_block_only() -> None:
    journal = SlotJournal(block_size=4)
    heard = _kinds(journal_cost.decode_step_feed, bs=3, block=4, steps=9)
    assert [len(h) for h in heard] == [3, 0, 0, 0, 3, 0, 0, 0, 3]
    assert {k for h in heard for k in h} == {JournalKind.ALLOCATED}
    for s in range(9):
        journal_cost.decode_step_feed(journal, s, 3, 4)
    # request 1's second block (entered at step 4) holds one event: its allocation, at the position written
    (e,) = journal.history(((1 << 12) + 1) * 4)
    assert (e.step, e.kind, e.first_position, e.last_position) == (4, JournalKind.ALLOCATED, 4, 4) and e.wrote
    # in one-slot blocks (the demo pool's) every request enters a block every step
    assert [len(h) for h in _kinds(journal_cost.decode_step_feed, bs=3, block=1, steps=4)] == [3, 3, 3, 3]


def test_each_feed_is_timed_beside_the_floor_of_its_own_events() -> None:
    kept: journal_cost.Kept = []
    for s in range(8):
        journal_cost._floor_allocated(kept, s, 3, 4)
    assert sum(len(k[0]) for k in kept) == sum(len(h) for h in _kinds(journal_cost.allocated_step_feed, bs=3,
                                                                       block=4, steps=8))
    assert all(len(k) == 2 for k in kept)  # blocks and owner codes: no positions
    kept.clear()
    for s in range(8):
        journal_cost._floor_step(kept, s, 3, 4)
    assert sum(len(k[0]) for k in kept) == sum(len(h) for h in _kinds(journal_cost.decode_step_feed, bs=3, block=4,
                                                                       steps=8))
    assert [list(k[1]) for k in kept] == [[0] * 3, [4] * 3]  # the positions each allocation carries


def test_the_feeds_blocks_are_each_requests_own() -> None:
    journal = SlotJournal(block_size=1)
    for s in range(3):
        journal_cost.decode_step_feed(journal, s, 2, 1)
    assert [o.id for o in journal.holders(journal_cost.BLOCKS_PER_REQUEST + 2)] == ["1"]


def test_the_busy_block_feed_files_a_quarter_of_its_events_on_block_0_and_the_release_path_reads_them() -> None:
    journal = SlotJournal(block_size=1, capacity=1 << 12)
    for s in range(4):
        journal_cost.busy_block_feed(journal, s)
    assert journal.recorded == 4 * (2 * journal_cost.BUSY_SHARERS + journal_cost.BUSY_WRITES)
    assert sum(e.block == 0 for e in journal.history(0)) == 4 * 2 * journal_cost.BUSY_SHARERS
    reads: list[int] = []
    holders = journal.holders

    def counted(slot: int) -> list[Owner]:
        reads.append(slot)
        return holders(slot)

    journal.holders = counted  # type: ignore[method-assign]
    journal_cost.release_path(journal)
    journal_cost.busy_block_feed(journal, 4)
    assert reads == [0] * journal_cost.BUSY_SHARERS and journal.holders(0) == []


def test_the_churn_feed_finishes_a_request_every_n_steps_and_reuses_ids_the_journal_restarts() -> None:
    bs, every = 4, 2
    feed = journal_cost.churn_feed(every)
    journal = SlotJournal(block_size=1)
    finished: list[str] = []
    kept_before: list[int | None] = []  # what the journal held of the id's last finish, at each finish
    finish = journal.finish

    def counted(rid: str, step: int) -> None:
        finished.append(rid)
        kept_before.append(journal.finished_step(rid))
        finish(rid, step)

    journal.finish = counted  # type: ignore[method-assign, assignment]
    steps = 2 * every * (journal_cost.RETRY_AGE + journal_cost.RETRY_EVERY)
    for s in range(steps):
        feed(journal, s, bs, 1)
    assert len(finished) == steps // every  # one finish every `every` steps
    assert journal.recorded == bs * steps  # and a decode of every row each step, as decode_step_feed's
    again = [i for i, r in enumerate(finished) if r in finished[:i]]
    assert again, "some new requests take a finished request's id (and finish in turn)"
    assert all(kept_before[i] is None for i in again)  # each took a block again first: a new request

"""The demo engine's journal feed records ownership changes, not tokens: one event per block a request enters
(its allocation, with the positions it wrote there folded in), nothing for a write into a block the request
wrote in the engine's previous forward, and a WRITTEN event only for a write into a block it was not handed."""

from __future__ import annotations

from collections import Counter
from typing import Any

from kvcanary.demo.engine import Engine, EngineConfig, demo_engine_config
from kvcanary.demo.engine.forward_batch import RowWork
from kvcanary.demo.engine.journal_feed import forward_events, reserved_writes
from kvcanary.demo.engine.requests import Request
from kvcanary.evidence.attribution import BugClass, first_anomaly, last_write
from kvcanary.guard import JournalKind, Owner, OwnerKind, SlotJournal
from tests.demo.harness import canary_config

Heard = list[tuple[int, JournalKind, list[int], Owner | None]]


def _row(req: Request | None, positions: list[int], locs: list[int]) -> RowWork:
    return RowWork(req=req, prefix=positions[0], extend=len(positions), input_ids=[0] * len(positions),
                   positions=positions, locs=locs)


def _owner(req: Request) -> Owner:
    return Owner(OwnerKind.REQUEST, str(req.rid))


def _listen(journal: SlotJournal) -> Heard:
    heard: Heard = []
    journal.add_observer(lambda step, kind, blocks, owner: heard.append((step, kind, blocks, owner)))
    return heard


def _decoding(n: int, new_tokens: int, *, draft: int = 0) -> tuple[Engine, list[Request]]:
    """An engine fed by the journal feed with ``n`` requests past their prefill (a pool large enough that
    nothing is evicted or retracted; ``draft`` tokens of speculative decoding)."""
    cfg = EngineConfig(num_slots=1024, req_rows=9, max_running=8, chunk_size=32, graph_buckets=(1, 2, 4, 8),
                       num_draft_tokens=draft)
    eng = Engine(cfg, canary=canary_config(), journal=True)
    eng.warmup()
    reqs = [eng.submit(list(range(1 + i, 20 + i)), new_tokens) for i in range(n)]
    while any(r.state.value in ("waiting", "prefill") for r in reqs):
        eng.step()
    return eng, reqs


def test_writes_without_a_reservation_are_one_written_entry_per_request_and_block() -> None:
    eng = Engine(demo_engine_config(), canary=canary_config(), journal=True)
    a = eng.submit([1, 2, 3], 2)
    b = eng.submit([4, 5], 2)
    rows = [
        _row(a, [8, 9, 10, 11, 12, 13], [17, 18, 19, 20, 21, 30]),  # blocks of 4: 4, 4, 4, 5, 5, 7
        _row(None, [0], [0]),  # padding
        _row(b, [5, 6, 8, 9], [40, 0, 41, 42]),  # slot 0 is left out; 8..9 go on in block 10: one entry
    ]
    allocated, written = forward_events([], rows, [], 4)
    assert allocated == ([], [], [], [])
    ra, rb = _owner(a), _owner(b)
    assert list(zip(*written, strict=True)) == [(4, ra, 8, 10), (5, ra, 11, 12), (7, ra, 13, 13), (10, rb, 5, 9)]


def test_a_write_into_a_block_just_reserved_for_its_request_is_folded_into_the_allocation() -> None:
    eng = Engine(demo_engine_config(), canary=canary_config(), journal=True)
    a = eng.submit([1, 2, 3], 2)
    b = eng.submit([4, 5], 2)
    rows = [_row(a, [4, 5], [17, 18]), _row(b, [2], [40])]  # a stamps positions one past its table's
    reserved = [(a, [17, 18, 19], 3), (b, [41], 2)]  # a's 19 is not written in this forward; b writes 40, not 41
    held: set[tuple[int, int]] = set()
    allocated, written = forward_events(reserved, rows, [], 1, held)
    ra, rb = _owner(a), _owner(b)
    # the positions written where the forward writes the slot, else the ones the reservation gives it
    assert list(zip(*allocated, strict=True)) == [(17, ra, 4, 4), (18, ra, 5, 5), (19, ra, 5, 5), (41, rb, 2, 2)]
    assert list(zip(*written, strict=True)) == [(40, rb, 2, 2)]  # b wrote a slot it was not handed
    assert held == {(a.rid, 17), (a.rid, 18), (a.rid, 19), (b.rid, 41)}
    # a later forward of the step: a writing the slot it was handed adds nothing, b's stray write is one entry
    allocated, written = forward_events([], [_row(a, [5], [19]), _row(b, [3], [42])], rows, 1, held)
    assert allocated == ([], [], [], []) and list(zip(*written, strict=True)) == [(42, rb, 3, 3)]


def test_a_write_into_a_block_written_in_the_previous_forward_records_nothing() -> None:
    eng = Engine(demo_engine_config(), canary=canary_config(), journal=True)
    a = eng.submit([1, 2, 3], 2)
    b = eng.submit([4, 5], 2)
    previous = [_row(a, [3, 4], [17, 18])]
    allocated, written = forward_events([], [_row(a, [3, 4], [17, 18])], previous, 1)
    assert allocated == written == ([], [], [], [])
    _, written = forward_events([], [_row(b, [3, 4], [17, 18])], previous, 1)  # another request: a write
    assert written[0] == [17, 18]


def test_the_no_loop_path_takes_only_rows_that_write_exactly_their_reservations() -> None:
    eng = Engine(demo_engine_config(), canary=canary_config(), journal=True)
    a = eng.submit([1, 2, 3], 2)
    b = eng.submit([4, 5], 2)
    rows = [_row(a, [3], [17]), _row(b, [7, 8], [21, 22])]
    got = reserved_writes([a, b], [[17], [21, 22]], rows)
    assert got is not None
    assert list(zip(*got, strict=True)) == [(17, _owner(a), 3, 3), (21, _owner(b), 7, 7), (22, _owner(b), 8, 8)]
    assert reserved_writes([b, a], [[17], [21, 22]], rows) is None  # rows in another order than reserved
    assert reserved_writes([a, b], [[21], [17, 22]], rows) is None  # a row writes another's slot
    assert reserved_writes([a], [[17]], rows) is None
    # the general path makes the same entries
    assert forward_events([(a, [17], 3), (b, [21, 22], 7)], rows, [], 1)[0] == got


def test_a_decode_step_records_one_allocation_per_request_with_its_position_and_no_write() -> None:
    eng, reqs = _decoding(3, 12)
    m = eng.canary
    assert m is not None
    heard = _listen(m.journal)
    step = eng.step_index
    kv = {r.rid: r.kv_len for r in reqs}  # a decode row writes the position after its KV
    eng.step()
    assert [(s, k) for s, k, _, _ in heard] == [(step, JournalKind.ALLOCATED)] * 3  # nobody left or joined
    assert sorted(o.id for *_, o in heard if o is not None) == sorted(str(r.rid) for r in reqs)
    for _, _, (slot,), owner in heard:
        (e,) = [e for e in m.journal.history(slot) if e.step == step]
        r = next(r for r in reqs if owner == _owner(r))
        assert e.kind is JournalKind.ALLOCATED and e.wrote
        assert e.first_position == e.last_position == kv[r.rid]
        assert slot == eng.memory.r2t.read(r.row, kv[r.rid], kv[r.rid] + 1)[0]


def test_a_forward_that_enters_no_block_records_nothing() -> None:
    eng, reqs = _decoding(2, 12)
    m = eng.canary
    assert m is not None
    eng.step()
    rows = [_row(r, [r.kv_len - 1], eng.memory.r2t.read(r.row, r.kv_len - 1, r.kv_len)) for r in reqs]
    eng.runner.build(rows)  # the slots this step's decode forward wrote, written again (a rewrite)
    before = m.journal.recorded
    heard = _listen(m.journal)
    eng.runner.build(rows)
    assert heard == [] and m.journal.recorded == before


def _events_per_step(eng: Engine, steps: int) -> tuple[list[int], list[int], list[JournalKind]]:
    """Per decode step: the events recorded and the slots handed out; every kind heard."""
    m = eng.canary
    assert m is not None
    kinds: list[JournalKind] = []
    m.journal.add_observer(lambda step, kind, blocks, owner: kinds.extend([kind] * len(blocks)))
    events, handed = [], []
    for _ in range(steps):
        before, free = m.journal.recorded, eng.memory.allocator.available
        rows = len(eng.requests.running)
        eng.step()
        events.append(m.journal.recorded - before)
        handed.append(free - eng.memory.allocator.available if rows == len(eng.requests.running) else -1)
    return events, handed, kinds


def test_over_a_long_decode_run_the_events_follow_the_blocks_entered_not_the_tokens() -> None:
    eng, reqs = _decoding(4, 40)
    events, handed, kinds = _events_per_step(eng, 30)
    # the demo pool hands each decode token a fresh one-slot block: one event per block entered, where the
    # old feed recorded two (the allocation and a write per token)
    assert events == handed == [len(reqs)] * 30
    assert set(kinds) == {JournalKind.ALLOCATED}


def test_speculative_decoding_records_the_slots_handed_out_and_nothing_for_the_drafts_written_into_them() -> None:
    k = 3
    eng, reqs = _decoding(2, 40, draft=k)
    m = eng.canary
    assert m is not None
    heard = _listen(m.journal)
    for _ in range(3):
        step = eng.step_index
        kv = {r.rid: r.kv_len for r in reqs}
        free = eng.memory.allocator.available
        eng.step()
        kinds = Counter(kind for s, kind, blocks, _ in heard if s == step for _ in blocks)
        freed = eng.memory.allocator.available - free + len(reqs) * (k + 1)  # the rejected drafts' slots
        assert kinds == Counter({JournalKind.ALLOCATED: len(reqs) * (k + 1), JournalKind.FREED: freed})
        for r in reqs:  # each slot it kept carries the position the target wrote there, as its allocation
            for i, slot in enumerate(eng.memory.r2t.read(r.row, kv[r.rid], r.kv_len)):
                e = m.journal.history(slot)[-1]
                assert (e.step, e.kind, e.owner) == (step, JournalKind.ALLOCATED, _owner(r))
                assert e.first_position == e.last_position == kv[r.rid] + i


def _decoded_engine(*prompts: list[int]) -> tuple[Engine, list[Any]]:
    cfg = EngineConfig(num_slots=1024, req_rows=9, max_running=8, chunk_size=32, graph_buckets=(1, 2, 4, 8))
    eng = Engine(cfg, canary=canary_config(), journal=True)
    eng.warmup()
    reqs = [eng.submit(p, 8) for p in prompts]
    while any(r.state.value in ("waiting", "prefill") for r in reqs):
        eng.step()
    return eng, reqs


def _one_token_row(r: Any, slot: int) -> RowWork:
    return RowWork(r, r.kv_len, 1, [r.tokens[r.kv_len]], [r.next_position], [slot])


def test_a_write_into_a_slot_freed_since_the_request_wrote_it_is_written() -> None:
    """A request wrote a slot, the slot was freed (a rollback), the request writes it again: a WRITTEN event (the
    earlier write no longer makes the block the request's)."""
    eng, (r,) = _decoded_engine(list(range(1, 20)))
    j = eng.canary.journal  # type: ignore[union-attr]
    [s] = eng.memory.alloc_slots(1)
    eng.requests.reserve(r, [s])
    eng.runner.build([_one_token_row(r, s)])
    eng.memory.free_slots([s])
    eng.runner.build([_one_token_row(r, s)])
    kinds = [e.kind for e in j.history(s)]
    assert kinds[-2:] == [JournalKind.FREED, JournalKind.WRITTEN], kinds
    anomaly = first_anomaly(j.history(s))
    assert anomaly is not None and anomaly.bug_class is BugClass.WRONG_CACHE_LOCATION


def test_a_stale_write_into_a_slot_handed_to_another_request_names_its_writer() -> None:
    """R writes s, s is freed and handed to R2, whose forward writes it, then R writes s: the last writer is R."""
    eng, (r, r2) = _decoded_engine(list(range(1, 20)), list(range(40, 60)))
    j = eng.canary.journal  # type: ignore[union-attr]
    [s] = eng.memory.alloc_slots(1)
    eng.requests.reserve(r, [s])
    eng.runner.build([_one_token_row(r, s)])
    eng.memory.free_slots([s])
    eng.requests.reserve(r2, [s])
    eng.runner.build([_one_token_row(r2, s)])
    eng.runner.build([_one_token_row(r, s)])
    w = last_write(j.history(s), eng.step_index)
    assert w is not None and w.owner is not None and w.owner.id == str(r.rid), w


def test_reserved_writes_gives_each_slot_its_rows_owner() -> None:
    """A row of two slots beside a row of none (the totals match the rows): both slots are the first row's."""
    eng = Engine(demo_engine_config(), canary=canary_config(), journal=True)
    a, b = eng.submit([1, 2, 3], 2), eng.submit([4, 5], 2)
    rows = [RowWork(a, 0, 2, [0, 0], [0, 1], [17, 18]), RowWork(b, 0, 0, [], [], [])]
    got = reserved_writes([a, b], [[17, 18], []], rows)
    assert got is not None
    assert [o.id for o in got[1] if o is not None] == [str(a.rid), str(a.rid)]

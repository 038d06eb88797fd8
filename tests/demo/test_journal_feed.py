"""The demo engine's journal feed records writes per run of positions, not per token: one WRITTEN entry per
request row and block a forward writes into, with the positions it wrote there."""

from __future__ import annotations

from kvcanary.demo.engine import Engine, demo_engine_config
from kvcanary.demo.engine.forward_batch import RowWork
from kvcanary.demo.engine.journal_feed import write_runs
from kvcanary.demo.engine.requests import Request
from kvcanary.guard import JournalKind, Owner, OwnerKind
from tests.demo.harness import canary_config


def _row(req: Request | None, positions: list[int], locs: list[int]) -> RowWork:
    return RowWork(req=req, prefix=positions[0], extend=len(positions), input_ids=[0] * len(positions),
                   positions=positions, locs=locs)


def test_write_runs_cut_at_block_changes_position_gaps_and_slot_zero() -> None:
    eng = Engine(demo_engine_config(), canary=canary_config(), journal=True)
    a = eng.submit([1, 2, 3], 2)
    b = eng.submit([4, 5], 2)
    rows = [
        _row(a, [8, 9, 10, 11, 12, 13], [17, 18, 19, 20, 21, 30]),  # blocks of 4: 4, 4, 4, 5, 5, 7
        _row(None, [0], [0]),  # padding
        _row(b, [5, 6, 8, 9], [40, 0, 41, 42]),  # slot 0 cuts the run; 8..9 go on in block 10
    ]
    blocks, owners, firsts, lasts = write_runs(rows, 4)
    ra, rb = Owner(OwnerKind.REQUEST, str(a.rid)), Owner(OwnerKind.REQUEST, str(b.rid))
    assert list(zip(blocks, owners, firsts, lasts, strict=True)) == [
        (4, ra, 8, 10), (5, ra, 11, 12), (7, ra, 13, 13), (10, rb, 5, 5), (10, rb, 8, 9)]
    blocks, _, firsts, lasts = write_runs(rows[:1], 1)  # one slot per block: a run per slot
    assert blocks == [17, 18, 19, 20, 21, 30] and firsts == lasts == [8, 9, 10, 11, 12, 13]


def test_a_decode_step_records_one_write_per_request() -> None:
    eng = Engine(demo_engine_config(), canary=canary_config(), journal=True)
    eng.warmup()
    reqs = [eng.submit(list(range(1 + i, 20 + i)), 12) for i in range(3)]
    while any(r.state.value in ("waiting", "prefill") for r in reqs):
        eng.step()
    m = eng.canary
    assert m is not None
    calls: list[tuple[int, list[int], Owner | None]] = []
    m.journal.add_observer(lambda step, kind, blocks, owner: calls.append((step, blocks, owner))
                           if kind is JournalKind.WRITTEN else None)
    step = eng.step_index
    kv = {r.rid: r.kv_len for r in reqs}  # a decode row writes the position after its KV
    eng.step()
    writes = [c for c in calls if c[0] == step]
    assert sorted(o.id for _, _, o in writes if o is not None) == sorted(str(r.rid) for r in reqs)
    for _, (slot,), owner in writes:
        (e,) = [e for e in m.journal.history(slot) if e.kind is JournalKind.WRITTEN and e.step == step]
        r = next(r for r in reqs if owner == Owner(OwnerKind.REQUEST, str(r.rid)))
        assert e.first_position == e.last_position == kv[r.rid]

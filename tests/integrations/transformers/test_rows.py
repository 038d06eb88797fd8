"""The sweep's entries from the mirrored block tables: one per token of each complete, known block."""

from __future__ import annotations

import random
from typing import Any

import torch

from kvcanary.integrations.transformers.rows import BlockInfo, RequestRows


class _Layout:
    page = 16
    stride = 24  # rows of a block in the cache's token view (a block's tokens need not fill its stride)


def _rows() -> RequestRows:
    layout: Any = _Layout()
    return RequestRows(layout, num_rows=2, max_len=8, device=torch.device("cpu"))


def test_sweep_entries_cover_every_token_of_known_blocks_in_order() -> None:
    rows = _rows()
    rng = random.Random()
    known = rng.sample(range(1, 200), 40)
    for b in known:
        rows.blocks_info[b] = BlockInfo(first_position=16 * rng.randrange(0, 50), prev_slot=rng.randrange(-1, 5000))
    asked = set(known[:30]) | {500, 501}  # two blocks without an entry (incomplete): skipped
    got = rows.sweep_entries(asked)
    got.validate()
    want: list[tuple[int, int, int]] = []
    for b in sorted(asked):
        info = rows.blocks_info.get(b)
        if info is None:
            continue
        for o in range(16):
            slot = b * 24 + o
            want.append((slot, info.first_position + o, info.prev_slot if o == 0 else slot - 1))
    assert list(zip(got.slots.tolist(), got.positions.tolist(), got.prev_slots.tolist(), strict=True)) == want


def test_sweep_entries_of_nothing_is_empty() -> None:
    got = _rows().sweep_entries({3, 4})
    got.validate()
    assert len(got) == 0


class _LiveLayout:
    """A layout whose block table the test edits in place, as the engine does."""

    page = 4
    stride = 6

    def __init__(self) -> None:
        self.block_table: dict[str, list[int]] = {}


def _evolve(rng: random.Random, layout: _LiveLayout, written: dict[str, int], free: list[int]) -> None:
    """One engine step: requests arrive (some sharing a live request's full blocks), grow, finish, and a
    block list is now and then rewritten (de-duplicated)."""
    table = layout.block_table
    if len(table) < 6 and rng.random() < 0.5:
        rid = f"r{rng.randrange(10**9)}"
        donor = rng.choice(list(table)) if table and rng.random() < 0.5 else None
        shared = table[donor][: written[donor] // layout.page] if donor is not None else []
        table[rid] = list(shared[: rng.randrange(len(shared) + 1)])
        written[rid] = len(table[rid]) * layout.page
    for rid in list(table):
        if rng.random() < 0.1:
            free += [b for b in table.pop(rid) if all(b not in bl for bl in table.values())]
            del written[rid]
            continue
        written[rid] += rng.choice((1, 1, 1, 3, 7))
        while len(table[rid]) * layout.page < written[rid]:
            table[rid].append(free.pop(rng.randrange(len(free))))
        if rng.random() < 0.03 and table[rid]:
            table[rid][0] = free.pop(rng.randrange(len(free)))  # a rewritten entry: the row is re-mapped


def test_incremental_sweep_entries_and_locs_match_the_full_rebuild() -> None:
    rng = random.Random(36)
    layout: Any = _LiveLayout()
    rows = RequestRows(layout, num_rows=16, max_len=4096, device=torch.device("cpu"))
    written: dict[str, int] = {}
    free = list(range(1, 3000))
    cached: list[int] = []
    rebuilt = 0
    for step in range(300):
        _evolve(rng, layout, written, free)
        rows.release_finished()
        reqs = list(layout.block_table)
        past = [max(0, written[r] - rng.choice((1, 1, 2))) for r in reqs]
        query = [written[r] - p for r, p in zip(reqs, past, strict=True)]
        if step % 2:
            row_ids = rows.sync_many(reqs, [written[r] for r in reqs])
        else:
            row_ids = [rows.sync(r, written[r]) for r in reqs]
        assert row_ids == [rows.row_of[r] for r in reqs]
        for r, row in zip(reqs, row_ids, strict=True):  # each row maps its tokens as the engine's table does
            n = min(len(layout.block_table[r]) * layout.page, rows.max_len)
            want_row = [b * layout.stride + o for b in layout.block_table[r] for o in range(layout.page)][:n]
            assert rows.device_table[row, :n].tolist() == want_row, (step, r)
        assert torch.equal(rows.device_table, rows._host)  # the device table is the host mirror, every row
        want_locs = [s for r, p, q in zip(reqs, past, query, strict=True) for s in rows.slots(r, p, p + q)]
        assert rows.locs(row_ids, past, query).tolist() == want_locs
        if step % 7 == 0:  # the prefix cache keeps some blocks, forgets others
            known = list(rows.blocks_info)
            cached = [*rng.sample(known, min(len(known), rng.randrange(0, 12))), 10**6]
        before = rows._entries
        got = rows.due_entries(list(cached))
        want = rows.sweep_entries(set(cached) | {b for b, n in _holders(layout).items() if n >= 2})
        rebuilt += got is not before
        assert rows.shared_blocks() == {b for b, n in _holders(layout).items() if n >= 2}
        for name in ("slots", "positions", "prev_slots"):
            assert torch.equal(getattr(got, name), getattr(want, name)), (step, name)
    assert 0 < rebuilt < 300  # rebuilt when something changed, else the previous entries as they were
    assert len(rows.shared_blocks()) > 0


def _holders(layout: Any) -> dict[int, int]:
    count: dict[int, int] = {}
    for blocks in layout.block_table.values():
        for b in blocks:
            count[b] = count.get(b, 0) + 1
    return count

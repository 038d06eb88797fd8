"""The rows' quiet-step path: a decode step of the previous step's requests in which none needs a re-map
returns the rows without a per-request sync, and every other step maps exactly as the per-request path does."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from kvcanary.integrations.transformers.rows import RequestRows


class _LiveLayout:
    """A layout whose block table the test edits in place, as the engine does."""

    def __init__(self, page: int = 4, stride: int = 6) -> None:
        self.page = page
        self.stride = stride
        self.block_table: dict[str, list[int]] = {}


def _rows(layout: Any, *, max_len: int = 4096) -> RequestRows:
    rows = RequestRows(layout, num_rows=24, max_len=max_len, device=torch.device("cpu"))
    rows.changes = []
    return rows


def _state(rows: RequestRows) -> tuple[object, ...]:
    return (dict(rows.row_of), {r: list(b) for r, b in rows._blocks.items()}, dict(rows._complete),
            dict(rows.blocks_info), rows.shared_blocks(), list(rows.changes or []), rows._host.clone())


def _step(rng: random.Random, layout: _LiveLayout, written: dict[str, int], free: list[int]) -> dict[str, int]:
    """One engine step, mostly quiet: every request decodes one token (crossing a block boundary when its length
    says so); now and then one joins, leaves, prefills a chunk, or has an entry of its block list rewritten in
    place. Returns each scheduled request's tokens this step."""
    table = layout.block_table
    query = dict.fromkeys(table, 1)
    if rng.random() < 0.05 and len(table) < 12:
        rid = f"r{rng.randrange(10**9)}"
        table[rid], written[rid] = [], 0
        query[rid] = rng.randrange(1, 40)
    if rng.random() < 0.05 and len(table) > 2:
        gone = rng.choice(list(table))
        free += table.pop(gone)
        del written[gone], query[gone]
    if rng.random() < 0.05 and query:
        query[rng.choice(list(query))] = rng.randrange(2, 20)
    for rid, n in query.items():
        written[rid] += n
        while len(table[rid]) * layout.page < written[rid]:
            table[rid].append(free.pop(rng.randrange(len(free))))
    if rng.random() < 0.03 and table:
        victim = rng.choice(list(table))
        if table[victim]:
            table[victim][rng.randrange(len(table[victim]))] = free.pop(rng.randrange(len(free)))
    return query


def test_quiet_steps_map_exactly_like_the_per_request_path() -> None:
    rng = random.Random(361)
    layout: Any = _LiveLayout(page=16, stride=20)
    fast, slow = _rows(layout), _rows(layout)
    written: dict[str, int] = {}
    free = list(range(1, 5000))
    for i in range(4):
        layout.block_table[f"s{i}"], written[f"s{i}"] = [], 0
    quiet = 0
    for step in range(400):
        query = _step(rng, layout, written, free)
        rids = list(query)
        rng.shuffle(rids) if step % 50 == 0 else None  # the engine's order changes now and then
        w = [written[r] for r in rids]
        before = fast._epoch
        for rows in (fast, slow):
            rows.release_finished()
        got = fast.sync_many(rids, w)
        slow._quiet = None  # the per-request path every step
        want = slow.sync_many(rids, w)
        quiet += fast._epoch == before
        assert got == want == [fast.row_of[r] for r in rids], step
        assert _state(fast)[:-1] == _state(slow)[:-1], step
        assert torch.equal(fast._host, slow._host) and torch.equal(fast.device_table, fast._host), step
        for r, row in zip(rids, got, strict=True):  # each row maps its tokens as the engine's table does (from scratch)
            n = min(len(layout.block_table[r]) * layout.page, fast.max_len)
            want_row = [b * layout.stride + o for b in layout.block_table[r] for o in range(layout.page)][:n]
            assert fast._host[row, :n].tolist() == want_row, (step, r)
        got += w  # the caller's list to extend (the pool appends the lengths to it): nothing kept changes
        rids.append("not a request")
    assert 100 < quiet < 400  # most steps are quiet ones (no sync, no release), not all


def test_one_request_crossing_a_block_among_quiet_ones_is_remapped() -> None:
    layout: Any = _LiveLayout()
    rows = _rows(layout)
    rids = ["a", "b", "c"]
    layout.block_table.update(a=[1], b=[2], c=[3, 4])
    written = {"a": 2, "b": 3, "c": 5}
    rows.sync_many(rids, [written[r] for r in rids])
    calls: list[str] = []
    sync = rows.sync

    def counted(rid: str, w: int) -> int:
        calls.append(rid)
        return sync(rid, w)

    rows.sync = counted  # type: ignore[method-assign,assignment]
    written = {"a": 3, "b": 4, "c": 6}  # b completes its block: its complete count moves
    rows.sync_many(rids, [written[r] for r in rids])
    assert calls == ["b"]
    assert rows.blocks_info[2].first_position == 0
    calls.clear()
    layout.block_table["b"].append(9)  # b crosses into a new block
    written = {"a": 4, "b": 5, "c": 7}  # a completes its block too
    rows.sync_many(rids, [written[r] for r in rids])
    assert calls == ["a", "b"]
    assert rows._host[rows.row_of["b"], 4:8].tolist() == [9 * 6 + o for o in range(4)]
    calls.clear()
    layout.block_table["a"].append(10)
    written = {"a": 5, "b": 6, "c": 8}  # a crosses, c completes its second block
    rows.sync_many(rids, [written[r] for r in rids])
    assert calls == ["a", "c"]
    calls.clear()
    written = {"a": 6, "b": 7, "c": 8}
    assert rows.sync_many(rids, [written[r] for r in rids]) == [rows.row_of[r] for r in rids]
    assert calls == []  # quiet: no request synced
    layout.block_table["c"][0] = 11  # an entry rewritten in place (a redirected block) on a quiet step
    rows.sync_many(rids, [written[r] for r in rids])
    assert calls == ["c"]
    assert rows._host[rows.row_of["c"], 0:4].tolist() == [11 * 6 + o for o in range(4)]


def test_quiet_path_still_refuses_a_request_past_max_len() -> None:
    layout: Any = _LiveLayout()
    rows = _rows(layout, max_len=8)
    layout.block_table.update(a=[1, 2])
    rows.sync_many(["a"], [7])
    rows.sync_many(["a"], [8])
    with pytest.raises(RuntimeError, match="max_context_len=8"):
        rows.sync_many(["a"], [9])

"""The rows' quiet-step path: a decode step of the previous step's requests in which none needs a re-map
returns the rows without a per-request sync, and every other step maps exactly as the per-request path does."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kvcanary.integrations.transformers.rows import RequestRows


class _Copies(TorchDispatchMode):
    """Counts the copies dispatched while it is on."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.n = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.n += func.overloadpacket.__name__ == "copy_"
        return func(*args, **(kwargs or {}))


class _LiveLayout:
    """A layout whose block table the test edits in place, as the engine does."""

    def __init__(self, page: int = 4, stride: int = 6) -> None:
        self.page = page
        self.stride = stride
        self.block_table: dict[str, list[int]] = {}


DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


def _rows(layout: Any, *, max_len: int = 4096, device: str = "cpu") -> RequestRows:
    rows = RequestRows(layout, num_rows=24, max_len=max_len, device=torch.device(device))
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


@pytest.mark.parametrize("device", DEVICES)
def test_quiet_steps_map_exactly_like_the_per_request_path(device: str) -> None:
    rng = random.Random(361)
    layout: Any = _LiveLayout(page=16, stride=20)
    fast, slow = _rows(layout, device=device), _rows(layout, device=device)
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
        assert torch.equal(fast._host, slow._host) and torch.equal(fast.device_table.cpu(), fast._host), step
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

    def counted(rid: str, w: int, **kw: Any) -> int:
        calls.append(rid)
        return sync(rid, w, **kw)

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


@pytest.mark.parametrize("device", DEVICES)
def test_many_rows_rewritten_in_one_step_reach_the_device_in_one_copy(device: str) -> None:
    layout: Any = _LiveLayout(page=4, stride=6)
    rows = _rows(layout, max_len=64, device=device)
    rids = [f"r{i}" for i in range(6)]
    for i, r in enumerate(rids):
        layout.block_table[r] = [10 * i + 1]
    rows.sync_many(rids, [4] * 6)
    assert torch.equal(rows.device_table.cpu(), rows._host)
    for i, r in enumerate(rids):  # all six cross into a second block: one band of the table
        layout.block_table[r].append(10 * i + 2)
    with _Copies() as copies:
        rows.sync_many(rids, [5] * 6)
    assert copies.n == 1 or device != "cpu"  # CUDA copies a strided band through contiguous temporaries
    assert torch.equal(rows.device_table.cpu(), rows._host)
    assert [rows.device_table[rows.row_of[r], 4:8].tolist() for r in rids] == [
        [(10 * i + 2) * 6 + o for o in range(4)] for i in range(6)]
    for r in rids[:3]:  # three short parts beside a new request's whole row: a wide, mostly untouched rectangle
        layout.block_table[r].append(99)
    layout.block_table["late"] = list(range(200, 216))
    with _Copies() as copies:
        rows.sync_many([*rids, "late"], [9, 9, 9, 5, 5, 5, 64])
    assert copies.n == 4 or device != "cpu"  # rows 1-7 by columns 0-64 is more than four times the 76 entries rewritten: one each
    assert torch.equal(rows.device_table.cpu(), rows._host)

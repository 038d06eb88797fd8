"""The guards' bounded records: the newest ``limit`` entries, oldest let go first, with every one counted."""

from __future__ import annotations

import re

import pytest

from kvcanary.guard.history import History, HistoryMap


def test_history_keeps_the_newest_items_in_order_and_counts_every_one() -> None:
    h: History[int] = History(3)
    assert not h and len(h) == 0 and h.total == 0 and h.dropped == 0
    for i in range(7):
        h.append(i)
    assert list(h) == [4, 5, 6] and len(h) == 3 and h
    assert h[0] == 4 and h[-1] == 6 and h[1:] == [5, 6] and h[::-1] == [6, 5, 4]
    assert h.total == 7 and h.dropped == 4
    assert 5 in h and 3 not in h and list(reversed(h)) == [6, 5, 4]
    with pytest.raises(IndexError):
        h[3]


def test_history_without_a_limit_keeps_everything() -> None:
    h: History[str] = History(None)
    for i in range(5000):
        h.append(str(i))
    assert len(h) == 5000 and h[0] == "0" and h.dropped == 0 and h.total == 5000


def test_history_map_lets_the_oldest_key_go_first_and_a_set_key_becomes_the_newest() -> None:
    gone: list[tuple[str, int]] = []
    m: HistoryMap[str, int] = HistoryMap(2, on_drop=lambda k, v: gone.append((k, v)))
    m["a"] = 1
    m["b"] = 2
    m["a"] = 3  # set again: "a" is now the newest, "b" the oldest
    assert list(m.items()) == [("b", 2), ("a", 3)] and m.total == 3 and m.dropped == 0 and not gone
    m["c"] = 4
    assert list(m) == ["a", "c"] and "b" not in m and m.dropped == 1 and gone == [("b", 2)]
    assert m == {"a": 3, "c": 4} and m.get("b") is None and len(m) == 2
    m.setdefault("d", 5)  # through __setitem__: bounded too
    assert list(m) == ["c", "d"] and gone == [("b", 2), ("a", 3)] and m.total == 5 and m.dropped == 2
    del m["c"]  # by hand: not counted as dropped, nobody told
    assert list(m) == ["d"] and m.dropped == 2 and len(gone) == 2


def test_history_map_without_a_limit_keeps_every_key() -> None:
    m: HistoryMap[int, int] = HistoryMap(None, on_drop=lambda k, v: pytest.fail("nothing is dropped"))
    for i in range(3000):
        m[i] = i
    assert len(m) == 3000 and m.dropped == 0 and m.total == 3000


@pytest.mark.parametrize(("limit", "error", "got"), [
    (0, ValueError, "0"), (-1, ValueError, "-1"), (True, ValueError, "True"),  # a bool is no size
    ("8", TypeError, "str '8'"), (2.0, TypeError, "float 2.0"),  # a wrong type: a TypeError
])
def test_a_bad_limit_is_refused(limit: object, error: type[Exception], got: str) -> None:
    for make in (History, HistoryMap):
        with pytest.raises(error, match=r"^kv-canary: limit must be a positive int or None \(keep everything\), "
                                        rf"got {re.escape(got)}$") as info:
            make(limit)  # type: ignore[arg-type]
        assert type(info.value) is error

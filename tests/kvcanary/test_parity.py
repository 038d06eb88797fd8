"""The parity comparator itself: ring rows compared as a multiset, overflow judged from the reference."""

from __future__ import annotations

import torch

from kvcanary.testing.parity import compare_ring


def _ring(rows: list[list[int]], cap: int) -> torch.Tensor:
    ring = torch.zeros(cap, 8, dtype=torch.int64)
    for i, r in enumerate(rows):
        ring[i] = torch.tensor(r + [0] * (8 - len(r)))
    return ring


def test_reordered_rows_agree() -> None:
    want = _ring([[9], [1], [2], [3]], 6)
    got = _ring([[9], [3], [1], [2]], 6)
    assert compare_ring(got, want, base=1, total=4, order_sensitive=False, exact_order=False) == []


def test_a_different_row_is_reported() -> None:
    want = _ring([[9], [1], [2]], 6)
    got = _ring([[9], [1], [7]], 6)
    assert compare_ring(got, want, base=1, total=3, order_sensitive=False, exact_order=False) == [
        "appended rows differ (as a multiset)"]


def test_reference_overflow_keeps_any_rows_even_unflagged() -> None:
    """Five rows into a ring with room for three: which three are kept depends on the order, whatever
    the caller predicted."""
    want = _ring([[9], [1], [2], [3]], 4)
    got = _ring([[9], [5], [4], [3]], 4)
    assert compare_ring(got, want, base=1, total=6, order_sensitive=False, exact_order=False) == []


def test_overflow_still_guards_the_prefix() -> None:
    want = _ring([[9], [1], [2], [3]], 4)
    got = _ring([[8], [5], [4], [3]], 4)
    assert compare_ring(got, want, base=1, total=6, order_sensitive=False, exact_order=False) == [
        "rows before the launch changed"]

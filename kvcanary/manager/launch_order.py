"""Ring rows read back put in launch order: K's rows of a forked phase before V's again.

In turn, a phase of one group launches K's verify and write before V's, so K's rows reach the ring before V's
(row field 0, the launch tag: ``HEAD_K_FULL`` 0 and ``HEAD_V_FULL`` 1, ``TAIL_K_FULL`` 2 and ``TAIL_V_FULL`` 3,
and so on; K's tag is even, V's is the next one). A phase captured with V on a second stream
(:mod:`kvcanary.manager.branch`) appends both halves' rows at once, in no fixed order. The read-back's new rows
are put back: within each maximal run of consecutive rows whose tags form one such pair (``tag // 2``) named in
``pairs`` (the phases ever forked), a stable sort by tag puts K's rows first, each half's rows in the order the
ring has them. Nothing else moves: rows of other pairs (a sweep, a phase never forked), and the order of runs.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

import numpy as np

Rows = np.ndarray[Any, np.dtype[np.int64]]


def in_launch_order(rows: Rows, pairs: Set[int]) -> Rows:
    """``rows`` (``n x VIOLATION_FIELDS``, as read back) with each run of one forked pair's rows sorted K first;
    ``rows`` itself when no such run has a V row before a K row (the usual case: nothing to move, nothing copied). A few
    vectorised passes over the tags; nothing at all below two rows or with no pair forked."""
    n = int(rows.shape[0])
    if n < 2 or not pairs:
        return rows
    tag = rows[:, 0]
    pair = tag // 2
    same = pair[1:] == pair[:-1]
    forked = np.isin(pair, np.fromiter(pairs, dtype=np.int64, count=len(pairs)))
    if not (same & (tag[1:] < tag[:-1]) & forked[1:]).any():
        return rows
    run = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(~same)))
    key = np.where(forked, tag, 0)  # a run of another pair keeps its order (one key for all its rows)
    return rows[np.lexsort((key, run))]

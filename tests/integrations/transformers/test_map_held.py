"""The map's quiet-step shortcut: a pinned host buffer that already holds the step's rows and extend lengths (the
same rows' sync record, the same lengths) gets only the prefix lengths rewritten. Every step's committed values must
still be the step's rows, prefix and extend lengths, also at the first step after such a shortcut in which the rows
or the lengths changed (the record kept per buffer must be dropped then)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from kvcanary.integrations.transformers import attach_canaries
from kvcanary.integrations.transformers.pool import PoolState
from kvcanary.integrations.transformers.workload import generate
from kvcanary.manager import CanaryBatch
from tests.integrations.transformers.harness import SEED, prompts


def _checked(monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], list[str]]:
    """Check each step's committed host values against the step's own; count the steps by what the map did to
    the buffer (``prefix``: the shortcut; ``full``: a full rewrite; ``changed``: a full rewrite of a buffer
    whose previous step took the shortcut, with other rows or lengths than it holds) and list the mismatches
    (not raised inside the step: the engine would turn the error into failed requests)."""
    seen: Counter[str] = Counter()
    bad: list[str] = []
    held: dict[int, tuple[list[int], list[int], bool]] = {}  # buffer -> (rows, extend lengths, shortcut taken)
    batch = PoolState.batch

    def checked(self: PoolState, rids: list[str], past: list[int], query: list[int], batch_data: dict[str, Any],
                *, written: list[int]) -> CanaryBatch:
        before = dict(self._held)
        out = batch(self, rids, past, query, batch_data, written=written)
        k, bs = self._pinned.index, len(rids)
        rows = [self.rows.row_of[r] for r in rids]
        want = np.array(rows + list(past) + list(query), dtype=np.int64)
        got = self._pinned._np[k][: 3 * bs]
        if not np.array_equal(got, want):
            bad.append(f"buffer {k} holds {got.tolist()}, want {want.tolist()}")
        short = k in before and before[k] is self._held[k]
        seen["prefix" if short else "full"] += 1
        prev = held.get(k)
        if not short and prev is not None and prev[2] and (prev[0], prev[1]) != (rows, list(query)):
            seen["changed"] += 1
        held[k] = (rows, list(query), short)
        return out

    monkeypatch.setattr(PoolState, "batch", checked)
    return seen, bad


def test_each_step_commits_its_own_rows_and_lengths(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    seen, bad = _checked(monkeypatch)
    with attach_canaries(model) as canary:
        generate(model, prompts(), max_new_tokens=40, page=32, num_blocks=64)
    assert bad == [], f"seed {SEED}"
    assert canary.reports == [], f"seed {SEED}"
    assert seen["prefix"] > seen["full"] > 0, f"seed {SEED}: {seen}"
    assert seen["changed"] > 0, f"seed {SEED}: no step changed a buffer that took the shortcut: {seen}"


def test_a_changed_length_after_the_shortcut_is_written(model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunked prefill beside decoding requests: steps whose requests and rows stay while a request's extend
    length changes (its last prompt chunk, then its first decode token)."""
    seen, bad = _checked(monkeypatch)
    long = [p * 6 for p in prompts()[:3]]
    with attach_canaries(model) as canary:
        generate(model, long, max_new_tokens=24, page=64, num_blocks=64, max_batch_tokens=40)
    assert bad == [], f"seed {SEED}"
    assert canary.reports == [], f"seed {SEED}"
    assert seen["prefix"] > 0 and seen["changed"] > 0, f"seed {SEED}: {seen}"

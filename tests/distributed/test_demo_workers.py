"""``kvcanary demo --workers 2``: the TP=2 and PD 2-process rows of the demo engine (about 15 s)."""

from __future__ import annotations

import random

from kvcanary.demo.workers import PD_FAULTS, worker_rows


def test_worker_rows_clean_silent_and_faults_caught() -> None:
    rows = worker_rows(24, "cpu", None, random.randrange(1000))
    assert [(r.mode, r.injected) for r in rows] == [
        ("TP=2", "-"), ("TP=2", "rank 1: wrong_cache_loc"), ("PD 2-proc", "-"),
        *[("PD 2-proc", d) for d in PD_FAULTS.values()]]
    assert all(r.ok for r in rows), [r.detail for r in rows]

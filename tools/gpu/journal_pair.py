"""The slot journal's host cost per decode step beside the journal it replaced, on one host (a GPU machine's CPU).

Both are fed ``benchmarks.journal_cost.JOURNAL_FEED`` (the demo engine's decode step: bs requests, one-slot
blocks, one ``record_each`` a step). The replaced journal (a list of event tuples per block) is kept in the tests
as the reference the columnar one is held to (``tests/manager/journal_reference.py``). Two regimes: 256 steps of a
fresh journal (what the old figure timed) and 4096 steps after 8192 (a long-running journal: the columnar ring's
folds, the old journal's evictions and the cyclic GC scanning its tuples). Fastest of three rounds each;
the floor printed first is ``journal_cost``'s (the step's events copied into machine arrays).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks import journal_cost
from kvcanary.guard.journal import SlotJournal
from tests.manager.journal_reference import ReferenceJournal


def per_step(make: Callable[[], object], warm: int, steps: int, bs: int) -> float:
    best = float("inf")
    for _ in range(3):
        journal = make()
        for s in range(warm):
            journal_cost.JOURNAL_FEED(journal, s, bs, 1)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        for s in range(warm, warm + steps):
            journal_cost.JOURNAL_FEED(journal, s, bs, 1)  # type: ignore[arg-type]
        best = min(best, (time.perf_counter() - t0) / steps)
    return best


def main() -> None:
    bs = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    floor = journal_cost.journal_step_seconds(bs=bs, block_size=1)[1]
    print(f"floor (the step's events copied into machine arrays, journal_cost) bs={bs}: {floor * 1e6:7.2f} us/step")
    for name, make in (("columnar journal (now)", lambda: SlotJournal(block_size=1)),
                       ("tuple journal (replaced)", lambda: ReferenceJournal(block_size=1))):
        fresh = per_step(make, 0, 256, bs)
        long = per_step(make, 8192, 4096, bs)
        print(f"{name:28s} bs={bs} block=1: fresh 256 steps {fresh * 1e6:7.2f} us/step, "
              f"4096 steps after 8192 {long * 1e6:7.2f} us/step")


if __name__ == "__main__":
    main()

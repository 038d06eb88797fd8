"""The bundle writer thread works from what the step's thread captured: it never reads the live slot journal,
which the engine's thread goes on recording into (a read flushes the journal's pending events into its ring: two
threads flushing at once can drop the events of a recording call) (rD)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence import read_bundle
from kvcanary.evidence.demo_bundles import run_fault_bundle
from kvcanary.guard.journal import JournalEvent, SlotJournal


@pytest.mark.xfail(strict=True, reason="rD: a sliding-window bundle's journal is read in assemble(), on the "
                                       "kvcanary-bundles thread (SlotJournal.history -> _flush), while the engine "
                                       "records into the same journal")
def test_a_sliding_window_bundle_reads_the_journal_on_the_steps_thread(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    readers: list[str] = []
    history = SlotJournal.history

    def spied(self: SlotJournal, slot: int) -> list[JournalEvent]:
        readers.append(threading.current_thread().name)
        return history(self, slot)

    monkeypatch.setattr(SlotJournal, "history", spied)
    path = run_fault_bundle(Fault.STALE_SWA_TRANSLATION, tmp_path)
    assert path is not None and read_bundle(path).meta["group"] == "SWA"
    assert readers and set(readers) == {threading.main_thread().name}, readers

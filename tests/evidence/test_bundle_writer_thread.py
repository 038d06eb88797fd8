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


def test_a_sliding_window_bundle_reads_the_journal_on_the_steps_thread(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    readers: list[str] = []
    history = SlotJournal.history

    def spied(self: SlotJournal, slot: int) -> list[JournalEvent]:
        readers.append(threading.current_thread().name)
        return history(self, slot)

    monkeypatch.setattr(SlotJournal, "history", spied)
    path = run_fault_bundle(Fault.STALE_SWA_TRANSLATION, tmp_path)
    assert path is not None
    meta = read_bundle(path).meta
    assert meta["group"] == "SWA" and meta["full_slots"] and meta["journal"]
    assert readers and set(readers) == {threading.main_thread().name}, readers
    # the history as it stood at the end of the captured step, not when the writer got to it
    assert max(e["step"] for e in meta["journal"]) <= meta["step_pumped"], (meta["journal"], meta["step_pumped"])

"""The bundle writer thread works from what the step's thread captured: it never reads the live slot journal,
which the engine's thread goes on recording into (a read flushes the journal's pending events into its ring: two
threads flushing at once can drop the events of a recording call) (rD)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

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


def test_a_sliding_window_capture_reads_no_device_value_back(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The capture (on the engine's thread, in the step) copies on the device only; its full slots are read at
    the step's end, one small read. ``nonzero`` (a read-back of its size) and friends are refused in it."""
    from kvcanary.evidence.capture import BundleSink

    capture = BundleSink._capture
    calls: list[str] = []

    def read_back(name: str) -> object:
        def refuse(*args: object, **kwargs: object) -> object:
            raise AssertionError(f"{name} in the capture: a device value read back to the host")
        return refuse

    def guarded(self: BundleSink, *args: object) -> object:
        calls.append("capture")
        with pytest.MonkeyPatch.context() as mp:
            for name in ("nonzero", "item", "tolist", "__bool__", "__int__"):
                mp.setattr(torch.Tensor, name, read_back(name))
            return capture(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(BundleSink, "_capture", guarded)
    path = run_fault_bundle(Fault.STALE_SWA_TRANSLATION, tmp_path)
    assert calls and path is not None
    meta = read_bundle(path).meta
    assert meta["group"] == "SWA" and meta["full_slots"]

"""A bundle whose journal history cannot be taken at the step's end (``BundleSink._with_history`` raising) loses no
other bundle of the step, and is not lost silently: it lands in ``errors`` as a failed write does (rE noted b)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from kvcanary.evidence import BundleSink
from kvcanary.evidence.capture import _Job
from tests.evidence.test_sink_name import _manager


@pytest.mark.parametrize("background", [False, True])
def test_a_failed_history_lands_in_errors_and_the_steps_other_bundles_are_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, background: bool) -> None:
    sink = BundleSink(_manager(), tmp_path, background=background)
    written: list[str] = []

    def with_history(job: _Job) -> Any:
        if job.path.name == "bundle-full-slot3-step1":
            raise KeyError("slot 3")
        return job.captured

    monkeypatch.setattr(sink, "_with_history", with_history)
    monkeypatch.setattr(sink, "_write", lambda job: written.append(job.path.name))
    names = ["bundle-full-slot3-step1", "bundle-full-slot5-step1"]
    sink._pending = [_Job(cast(Any, None), tmp_path / n) for n in names]
    sink.on_step(cast(Any, None))  # the step's end: each job's history, then the writer
    sink.close()
    assert written == ["bundle-full-slot5-step1"]
    assert sink.errors == ["bundle-full-slot3-step1: KeyError: 'slot 3'"] and sink._pending == []

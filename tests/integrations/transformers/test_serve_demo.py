"""``kvcanary demo --engine transformers --serve``: the command as a user runs it, on a real server."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the 'serve' extra (transformers[serving]) is not installed")

from kvcanary.cli import main
from kvcanary.integrations.transformers.fault_kinds import TfFault
from kvcanary.serve.demo import run_serve_demo
from tests.integrations.transformers.harness import SEED


def test_serve_demo_one_fault_seen_from_outside(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["demo", "--engine", "transformers", "--serve", "--fault", "block_table_redirect",
                   "--seed", str(SEED)])
    out = capsys.readouterr().out
    assert status == 0, f"seed {SEED}:\n{out}"
    assert "=== clean [OK]" in out and "=== block_table_redirect [OK]" in out
    assert "/metrics: kvcanary_violations_total +" in out and "health: 200 degraded" in out
    assert "clean run silent, every fault seen from outside, no healthy request failed" in out


def test_serve_demo_reports_an_unseen_fault_as_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault that never fires is not seen: the run fails (the demo cannot pass without detections)."""
    import io

    from kvcanary.integrations.transformers import faults

    monkeypatch.setitem(faults._FIRE, TfFault.KV_FLIP_USED, lambda hook, view: False)
    out = io.StringIO()
    outcomes = run_serve_demo([TfFault.KV_FLIP_USED], device="cpu", backend=None, seed=SEED, max_tokens=8,
                              on_violation="log", out=out)
    assert [o.ok for o in outcomes] == [True, False], out.getvalue()
    assert "NOT DETECTED" in out.getvalue()


def test_serve_needs_the_transformers_engine(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--serve"]) == 2
    assert "--serve needs --engine transformers" in capsys.readouterr().err

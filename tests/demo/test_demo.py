"""``kvcanary demo``: the CLI entry, its exit status, its output, its progress bar."""

from __future__ import annotations

import io

import pytest

from kvcanary import cli
from kvcanary.demo import DemoSettings, ProgressBar, run_demo
from kvcanary.demo.engine import Fault


def test_demo_cli_detects_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--fault", "kv_flip_used", "--steps", "16"]) == 0
    out = capsys.readouterr().out
    assert "=== clean [OK]" in out and "=== kv_flip_used [OK]" in out
    assert "detected in step" in out and "kv_canary violation: launch_tag=TAIL_K_FULL" in out
    assert "summary" in out and "clean run silent, every fault detected" in out
    assert "kvcanary demo on cpu; backend per operation: plan=torch_ref," in out.splitlines()[0]
    assert "lag: found - fired" in out  # the summary's legend


def test_demo_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--fault", "none", "--steps", "4"]) == 2
    assert "--steps must be >= 16" in capsys.readouterr().err
    assert cli.main(["demo", "--fault", "none", "--backend", "nosuch"]) == 2
    assert "no backend named 'nosuch' is registered" in capsys.readouterr().err


def test_a_missed_fault_fails_the_demo() -> None:
    """Too few steps for the retract to happen: the double allocation never occurs, the run is MISSED."""
    out = io.StringIO()
    outcomes = run_demo([Fault.DOUBLE_ALLOC], DemoSettings(steps=6), out)
    assert outcomes[0].ok and not outcomes[1].ok
    assert "the buggy code path never ran" in out.getvalue() and "MISSED" in out.getvalue()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_draws_on_a_terminal_and_stays_quiet_otherwise() -> None:
    tty = _Tty()
    bar = ProgressBar(4, stream=tty, width=8)
    bar.advance(2, "x")
    assert "[####....]    2/4" in tty.getvalue()
    bar.close()
    quiet = io.StringIO()
    ProgressBar(4, stream=quiet).advance(1)
    assert quiet.getvalue() == ""

"""``kvcanary demo``: the CLI entry, its exit status, its output, its progress bar."""

from __future__ import annotations

import io

import pytest

from kvcanary import cli
from kvcanary.demo import DemoSettings, ProgressBar, RunOutcome, run_demo
from kvcanary.demo import run as run_module
from kvcanary.demo.engine import Fault
from kvcanary.demo.report import EXPECTED_UNSEEN, plan, summary


def test_demo_cli_detects_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--fault", "kv_flip_used", "--steps", "16"]) == 0
    out = capsys.readouterr().out
    assert "=== clean [OK]" in out and "=== kv_flip_used [OK]" in out
    assert "detected in step" in out and "kv_canary violation: launch_tag=TAIL_K_FULL" in out
    assert "summary" in out and "clean run silent, every fault detected" in out
    assert "kvcanary demo on cpu; backend per operation: fold=torch_ref, plan=torch_ref," in out.splitlines()[0]
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


def _outcome(fault: Fault | None, *, extensions: bool = False) -> RunOutcome:
    return RunOutcome(fault=fault, fired_step=1 if fault is not None else None, fired_detail="", events=(),
                      peer_violations=0, steps=16, seconds=0.1, protected_tokens=0, sweep_passes=0,
                      extensions=extensions)


def test_each_run_is_printed_before_the_next_one_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocks are not held back to the end: when a run starts, every earlier run's block is out."""
    out = io.StringIO()
    seen: list[str] = []

    def fake_run_one(fault: Fault | None, settings: DemoSettings, progress: ProgressBar | None = None, *,
                     extensions: bool = False) -> RunOutcome:
        seen.append(out.getvalue())
        return _outcome(fault, extensions=extensions)

    monkeypatch.setattr(run_module, "run_one", fake_run_one)
    monkeypatch.setattr(run_module, "chosen_backends", lambda settings: {"verify": "torch_ref"})
    run_demo([Fault.RADIX_UAF, Fault.DOUBLE_ALLOC], DemoSettings(steps=16), out)
    assert len(seen) == 3
    assert "=== clean" not in seen[0]
    assert "=== clean" in seen[1] and "=== radix_uaf" not in seen[1]
    assert "=== radix_uaf" in seen[2] and "summary" not in seen[2]
    assert "3 run(s): the clean run, 2 bug class(es) the default checks catch" in seen[0]


def test_extension_only_rows_do_not_read_as_failures() -> None:
    out = io.StringIO()
    summary([_outcome(None), _outcome(Fault.PREFIX_MISS_ZERO_ROW)], out)
    row = next(line for line in out.getvalue().splitlines() if line.startswith("prefix_miss_zero_row "))
    assert row.endswith(EXPECTED_UNSEEN) and "missed" not in row.lower() and "fail" not in row.replace(
        "not a failure", "")
    assert "cannot see it by design" in out.getvalue()
    text = io.StringIO()
    plan([Fault.RADIX_UAF, Fault.PREFIX_MISS_ZERO_ROW], 4, text)
    assert "1 extension-only class(es) run twice" in text.getvalue()

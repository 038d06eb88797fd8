"""``kvcanary demo --bundles DIR`` and the demo's other options: each is honoured or refused in one line (exit
status 2, nothing written), never silently dropped; the run prints its table, not the manager's log."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from kvcanary.cli import main
from kvcanary.evidence import demo_bundles
from kvcanary.evidence.capture import BundleSink
from kvcanary.evidence.pick import KeepError, keep_replayable
from tests.cli.test_cli import kvcanary_cmd

NO_CUDA = "cuda" if not torch.cuda.is_available() else "cuda:99"


@pytest.mark.parametrize("extra", [["--device", "nonsense"], ["--device", NO_CUDA], ["--backend", "nope"],
                                   ["--backend", "cuda"], ["--steps", "1"], ["--compile"], ["--workers", "2"],
                                   ["--on-violation", "isolate"], ["--serve"]], ids=" ".join)
def test_an_option_bundles_cannot_honour_is_one_line(extra: list[str], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--bundles", str(tmp_path / "b"), "--fault", "kv_flip_used", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "(hint: " in err[0], err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(("args", "said"), [
    (["--fault", "block_handed_twice"], "--fault block_handed_twice is a fault class of the transformers engine only"),
    (["--engine", "transformers", "--fault", "radix_uaf"], "--fault radix_uaf is a fault class of the kvcanary "
                                                           "engine only"),
    (["--fault", "kv_flip_usd"], "did you mean kv_flip_used"),
], ids=" ".join)
def test_a_fault_class_is_checked_as_the_plain_demo_checks_it(args: list[str], said: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--bundles", str(tmp_path / "b"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not (tmp_path / "b").exists()


def test_demo_bundles_prints_no_violation_log(tmp_path: Path) -> None:
    res = kvcanary_cmd("demo", "--bundles", str(tmp_path / "b"), "--fault", "kv_flip_used", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "kv_canary violation" not in res.stderr, res.stderr.splitlines()[:3]


def test_the_honoured_options_reach_each_run_and_the_log_level_comes_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[dict[str, Any], int]] = []
    log = logging.getLogger("kvcanary.manager")

    def fake_run(fault: object, out_dir: Path, **kwargs: Any) -> None:
        seen.append((kwargs, log.level))

    monkeypatch.setattr(demo_bundles, "run_fault_bundle", fake_run)
    before = log.level
    log.setLevel(logging.DEBUG)
    try:
        assert main(["demo", "--bundles", str(tmp_path / "b"), "--fault", "kv_flip_used", "--steps", "24",
                     "--seed", "7", "--backend", "torch_ref", "--device", "cpu"]) == 1  # the fake writes none
        assert log.level == logging.DEBUG
    finally:
        log.setLevel(before)
    assert seen == [({"steps": 24, "seed": 7, "device": "cpu", "backend": "torch_ref"}, logging.ERROR)]


def test_a_file_where_a_bundle_goes_is_one_line_naming_it(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "demo-kv_flip_used").write_text("mine")
    assert main(["demo", "--bundles", str(tmp_path), "--fault", "kv_flip_used"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path / "demo-kv_flip_used") in err[0] and "is a file" in err[0], err
    assert (tmp_path / "demo-kv_flip_used").read_text() == "mine"


class _Sink:
    """What keep_replayable reads of a sink: close() and errors."""

    def __init__(self, written: list[Path], errors: list[str]) -> None:
        self.written, self.errors = written, errors

    def close(self) -> list[Path]:
        return self.written


def test_keep_replayable_names_a_file_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "target").write_text("mine")
    sink: Any = _Sink([tmp_path / "x"], [])
    with pytest.raises(KeepError, match="a file is there") as info:
        keep_replayable(sink, tmp_path / "target")
    assert info.value.path == tmp_path / "target"
    assert (tmp_path / "target").read_text() == "mine"


def test_a_sink_write_error_is_one_line_naming_the_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    close = BundleSink.close

    def failing_close(self: BundleSink) -> list[Path]:
        out = close(self)
        self.errors.append("slot-70: OSError: No space left on device")
        return out

    monkeypatch.setattr(BundleSink, "close", failing_close)
    assert main(["demo", "--bundles", str(tmp_path / "b"), "--fault", "kv_flip_used"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path / "b" / "demo-kv_flip_used") in err[0], err
    assert "No space left on device" in err[0] and "(hint: " in err[0], err
    assert not (tmp_path / "b").exists()

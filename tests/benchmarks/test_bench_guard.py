"""bench_guard's verdict (overhead against the A/A noise) and a quick CPU run that writes its records; the soak's
``--jobs`` runs the same clean runs as one process does.

Only what the scripts decide and write is checked: their figures are measured on the GPU machine, never here.
"""

from __future__ import annotations

import functools
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import timing
from benchmarks.bench_guard import VARIANTS, verdict
from tools.docsgen import benchmarks as docs

ROOT = Path(__file__).resolve().parents[2]


def rounds(log: list[float], again: list[float], iso: list[float]) -> dict[str, list[float]]:
    return dict(zip(VARIANTS, (log, again, iso), strict=True))


def test_the_verdict_pairs_rounds_and_asks_whether_the_interval_reaches_zero() -> None:
    # isolate lands within a percent of the round's log figure, either side: its interval reaches zero
    log = [10.0, 10.2, 9.9, 10.1, 10.0, 10.3, 9.8, 10.0]
    again = [10.1, 10.0, 10.0, 10.2, 9.9, 10.2, 9.9, 10.1]
    iso = [10.1, 10.0, 10.0, 10.0, 10.1, 10.2, 9.9, 10.1]
    v = verdict(rounds(log, again, iso))
    assert v.rounds == 8 and v.low <= 0.0 <= v.high and not v.measurable
    assert v.text().startswith("not measurable: overhead ") and "8 paired rounds" in v.text()
    assert v.noise == pytest.approx(statistics.median(abs(b / a - 1) for a, b in zip(log, again, strict=True)))
    # 5 % slower in every round: measurable, with that overhead
    v = verdict(rounds(log, again, [1.05 * (a + b) / 2 for a, b in zip(log, again, strict=True)]))
    assert v.measurable and v.overhead == pytest.approx(0.05) and v.low == pytest.approx(0.05)
    assert v.text().startswith("measurable: overhead +5.0% (95% interval +5.0% to +5.0%")
    # faster than the floor is never measurable
    assert not verdict(rounds(log, again, [0.9 * x for x in log])).measurable


def test_the_pairing_removes_drift_that_hits_every_variant() -> None:
    # the machine is twice as slow in every other round; isolate is 0.1 % slower than the log policy in each round.
    # Unpaired, the slow rounds would swamp it; paired, the overhead is exactly that 0.1 %
    log = [10.0, 20.0] * 6
    iso = [10.01, 20.02] * 6
    v = verdict(rounds(log, list(log), iso))
    assert v.overhead == pytest.approx(0.001) and v.noise == 0.0 and v.measurable
    # the same rounds give the same verdict (the bootstrap's seed is fixed)
    assert verdict(rounds(log, list(log), iso)) == v


def test_rotated_rounds_change_which_variant_runs_first() -> None:
    order: list[str] = []
    fns: dict[str, timing.Fn] = {k: functools.partial(order.append, k) for k in "abc"}
    timing.interleaved_rounds(fns, calls=1, rounds=3, warmup=0, rotate=True)
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    order.clear()
    timing.interleaved_rounds(fns, calls=1, rounds=2, warmup=0)
    assert order == ["a", "b", "c", "a", "b", "c"]


def test_cpu_quick_run_prints_the_verdict_and_writes_its_records(tmp_path: Path) -> None:
    out = tmp_path / "results" / "bench_guard.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_guard.py"), "--device", "cpu", "--bs", "2", "--ctx",
           "32", "--engine-steps", "4", "--out", str(out)]
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    cases = [r.case for r in docs.load(out.parent)]  # the renderer's schema
    eng = "kvcanary engine bs=4 ctx=64"
    assert cases == ["manager_step bs=2 ctx=32 isolate (nothing fires)", "manager_step bs=2 ctx=32 log again "
                     "(A/A: the noise)", f"engine_step (journal fed) {eng} isolate (nothing fires)",
                     f"engine_step (journal fed) {eng} log again (A/A: the noise)",
                     f"engine_step: the isolate guard's journal feed per step {eng}",
                     f"engine_step: journal feed share {eng}"]
    records = {r.case: r for r in docs.load(out.parent)}
    feed = records[f"engine_step: the isolate guard's journal feed per step {eng}"]
    assert feed.figure > 0 and feed.floor is not None and feed.floor > 0  # the guard fed events, timed in place
    notes = json.loads((out.parent / "raw" / "bench_guard_raw.json").read_text())["notes"]
    assert len(notes) == 3 and all("measurable: overhead " in n and "run-to-run noise" in n for n in notes[:2])
    assert notes[2].startswith("engine_step: the guard's journal feed is ") and "run-to-run noise" in notes[2]
    assert all(n in run.stdout for n in notes)


@pytest.mark.slow
def test_soak_jobs_run_the_same_clean_runs(tmp_path: Path) -> None:
    results = {}
    for jobs in (1, 2):
        out = tmp_path / f"soak_{jobs}.json"
        cmd = [sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--steps", "12", "--episodes", "0",
               "--on-violation", "isolate", "--jobs", str(jobs), "--out", str(out)]
        run = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        assert "every fault episode isolated" in run.stdout
        results[jobs] = [{k: v for k, v in c.items() if k != "seconds"} for c in json.loads(out.read_text())["clean"]]
    assert [c["layout"] for c in results[1]] == ["hybrid", "spec"]
    assert results[1] == results[2]

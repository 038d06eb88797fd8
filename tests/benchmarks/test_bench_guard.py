"""bench_guard's verdict (overhead against the A/A noise) and a quick CPU run that writes its records; the soak's
``--jobs`` runs the same clean runs as one process does.

Only what the scripts decide and write is checked: their figures are measured on the GPU machine, never here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_guard import VARIANTS, verdict
from tools.docsgen import benchmarks as docs

ROOT = Path(__file__).resolve().parents[2]


def rounds(log: list[float], again: list[float], iso: list[float]) -> dict[str, list[float]]:
    return dict(zip(VARIANTS, (log, again, iso), strict=True))


def test_the_verdict_weighs_the_overhead_against_the_a_a_noise() -> None:
    # the two log variants land 2% apart (and 4% in the second half of the rounds): that is the noise
    v = verdict(rounds([10.0, 10.0, 10.0, 10.0], [10.2, 10.3, 10.4, 10.4], [10.3, 10.4, 10.3, 10.3]))
    assert v.floor == 10.0 and v.figure == 10.3 and v.noise == pytest.approx(0.04)
    assert not v.measurable and v.text().startswith("not measurable: overhead +3.0%, run-to-run noise 4.0%")
    v = verdict(rounds([10.0, 10.1], [10.05, 10.1], [11.0, 11.2]))
    assert v.measurable and v.text().startswith("measurable: overhead +10.0%")
    # faster than the floor is never measurable
    assert not verdict(rounds([10.0, 10.0], [10.0, 10.0], [9.0, 9.5])).measurable


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

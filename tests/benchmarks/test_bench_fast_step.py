"""bench_fast_step runs end to end on the CPU (shrunk model, eager) and writes records the docs renderer reads.

Only that it completes and what it writes are checked: its figures are measured on the GPU, never here.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from tools.docsgen import benchmarks as docs

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_quick_run_writes_its_records(tmp_path: Path) -> None:
    out = tmp_path / "results" / "bench_fast_step.json"
    # one KV buffer for the 2 layers: the layers share it, as when a large pool does not fit on the GPU
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_fast_step.py"), "--device", "cpu", "--quick",
           "--kv-buffers", "1", "--out", str(out)]
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    results = docs.load(out.parent)  # the renderer's schema
    cases = [r.case for r in results]
    assert {r.benchmark for r in results} == {"bench_fast_step"}
    for variant in ("full", "budget 1/16"):
        for what in ("canary device time", "canary device share of the step", "canary host time (prepare",
                     "canary host time not hidden", "canary share of the wall step", "canary alone"):
            assert any(c.startswith(f"{what}") and f"{variant} bs=4 ctx=128, KV in 1 buffers" in c for c in cases), (what, variant)
    assert "step device time, model only bs=4 ctx=128, KV in 1 buffers" in cases
    assert all(math.isfinite(r.figure) for r in results)
    raw = json.loads((out.parent / "raw" / "bench_fast_step_raw.json").read_text())
    assert "copy bandwidth (B/s, read + written)" in raw["floors"]
    assert "violations" not in run.stdout  # a clean pool: the managers reported nothing

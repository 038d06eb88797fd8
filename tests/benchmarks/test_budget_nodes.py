"""budget_nodes runs end to end on the CPU and its node groups are the manager's budgeted forward, launch for
launch (its figures are measured on the GPU, never here)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import torch

from benchmarks import budget_nodes as bn
from benchmarks.bench_fast_step import SMOKE, Pool, attach_canary
from kvcanary.manager import VerifyBudget

ROOT = Path(__file__).resolve().parents[2]


def test_groups_compose_the_managers_forward() -> None:
    pool = Pool(SMOKE, bs=3, ctx=24, buffers=1, device=torch.device("cpu"))
    budget = VerifyBudget(max_entries=3 * 23 // 4)
    m, batch = attach_canary(pool, budget=budget, backend="torch_ref", chunk=8, graphs=False)
    nodes = bn.forward_nodes(m._forwards[0], batch)
    assert [n.group for n in nodes] == ["staging", "plan", "verify_budget", "verify", "write", "verify", "write",
                                        "verify", "write", "verify", "write"]
    per_node = Counter[str]()
    for n in nodes:
        per_node[n.group] += bn.host_launches(n.fn)
    # one launch per node: the staging copy is one torch.cat, the overflow count is the filter's
    assert per_node == {"staging": 1, "plan": 1, "verify_budget": 1, "verify": 4, "write": 4}

    def manager() -> None:
        m.prepare(batch)
        m.head(batch)
        m.tail()

    assert bn.host_launches(manager) == bn.host_launches(bn.run_all([n.fn for n in nodes])) == 11
    assert [n.half for n in nodes if n.group in ("verify", "write")] == ["k", "k", "v", "v"] * 2
    assert [n.phase for n in nodes if n.group in ("verify", "write")] == ["head"] * 4 + ["tail"] * 4
    m.end_step()
    m.flush()
    assert m.total_violations == 0


def test_cpu_quick_run_writes_every_variant(tmp_path: Path) -> None:
    out = tmp_path / "budget_nodes.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "budget_nodes.py"), "--device", "cpu", "--quick",
           "--backend", "torch_ref", "--out", str(out)]
    run = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    cases = [rec["case"] for rec in json.loads(out.read_text())]
    names = ["all", "all, sequential", "all, in turn"] + [f"{w} {g}" if w == "without" else f"{g} {w}"
                                        for g in bn.GROUPS for w in ("without", "alone")]
    names += ["V on a second branch", "what if: K only"]
    assert cases == [f"HEAD + TAIL eager, {n} bs=2 ctx=32" for n in names]
    assert "staging 1, plan 1, verify_budget 1, verify 4, write 4" in run.stdout

"""The soak, short: a randomized legal workload stays silent for a couple of thousand steps, and every fault
class injected at a random step is reported within its documented bound, never before it fired.

``benchmarks/soak.py`` runs the long version (100,000 steps and 100 fault episodes by default).
"""

from __future__ import annotations

import pytest

from kvcanary.demo.engine.faults import CORE_FAULTS, DETECTION_BOUND
from kvcanary.demo.soak import SoakSettings, clean_run, fault_runs

STEPS = {"hybrid": 1200, "spec": 400}


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(STEPS))
def test_a_long_random_legal_workload_is_silent(layout: str) -> None:
    r = clean_run(layout, SoakSettings(steps=STEPS[layout], seed=1))
    assert r.reports == 0, f"{r.reports} report(s) in a clean {layout} run"
    assert r.finished > 100 and r.prefix_hits > 50 and r.evicted_slots > 0 and r.aborts > 0 and r.retracts > 0
    if layout == "hybrid":
        assert r.transfers > 0 and r.swa_evictions > 0
    else:
        assert r.rollbacks > 0


@pytest.mark.slow
def test_every_fault_class_is_caught_within_its_bound() -> None:
    results = fault_runs(SoakSettings(episodes=len(CORE_FAULTS), seed=1))  # the extension-only classes: the demo
    assert {r.fault for r in results} == set(CORE_FAULTS)
    for r in results:
        assert r.early_reports == 0, f"{r.fault.value}: reported before it fired"
        assert r.fired_step is not None, f"{r.fault.value}: its code path never ran"
        assert not r.harmless and not r.crashed, f"{r.fault.value}: no conclusive episode in four ({r.error})"
        assert r.lag is not None and r.lag <= DETECTION_BOUND[r.fault], (r.fault.value, r.lag, r.error)

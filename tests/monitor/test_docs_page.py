"""docs/monitoring.md: its code runs, and it lists every metric the sink exports and every event field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from kvcanary.guard.decision import FinishedRequest, GuardDecision
from kvcanary.manager.reporter import ViolationEvent
from kvcanary.monitor import Monitor
from kvcanary.monitor.events import decision_event, violation_event
from kvcanary.violations import Violation

PAGE = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"


def test_the_page_code_runs(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    blocks = re.findall(r"^```python\n(.*?)^```", PAGE.read_text(), flags=re.S | re.M)
    assert len(blocks) == 2
    exec(compile(blocks[0], str(PAGE), "exec"), {"__name__": "docs_monitoring"})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "degraded" and "kvcanary_violations_total{" in out[1]


def test_every_exported_metric_is_documented() -> None:
    mon = Monitor(registry=CollectorRegistry())
    assert mon.metrics is not None
    names = {f.name + ("_total" if f.type == "counter" else "") for f in mon.metrics.describe()}
    text = PAGE.read_text()
    documented = set(re.findall(r"^\| `(kvcanary_[a-z_]+)` \|", text, flags=re.M))
    assert names == documented


def test_every_violation_event_field_is_documented() -> None:
    row = (2, 3, 4, 5, 6, 7, 8, 1)
    e = violation_event(ViolationEvent(Violation.from_row(row), "", 0, 1, 2), request_ids=["r"])
    text = PAGE.read_text()
    section = text[text.index("A **violation** event"):text.index("An **isolation** event")]
    for key in e:
        assert f"`{key}`" in section, key


def test_every_isolation_event_field_is_documented() -> None:
    d = GuardDecision(step=3, events=(), quarantine=(1,), quarantine_swa=(2,),
                      finished=(FinishedRequest("r", 2),), notes=("n",))
    text = PAGE.read_text()
    section = text[text.index("An **isolation** event"):text.index("A violation event, formatted")]
    for key in decision_event(d):
        assert f"`{key}`" in section, key

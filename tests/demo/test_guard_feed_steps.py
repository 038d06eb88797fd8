"""The isolate guard and the journal feed record into the same journals: a decision applied from a manager's
end_step (its step already moved on, the engine's step index not yet) must not file any event below the
journals' latest step (the journal refuses a step that goes back, which would raise inside the serving step)."""

from __future__ import annotations

import dataclasses

from kvcanary.demo.engine import Engine, EngineConfig
from kvcanary.demo.engine.requests import Request
from kvcanary.guard import GuardDecision, ViolationPolicy
from kvcanary.guard.decision import RequestFailure
from tests.demo.harness import canary_config


def _failure(req: Request, step: int) -> RequestFailure:
    return RequestFailure(request_id=str(req.rid), code="KVC-G001", check="per_forward_head_k_full", slot=1,
                          position=0, fail_reasons=("K",), step=step, message=f"request {req.rid} failed")


def _decoding() -> tuple[Engine, list[Request]]:
    """An engine with the isolate guard and the journal feed, two requests past their prefill."""
    cfg = EngineConfig(num_slots=256, req_rows=5, max_running=4, chunk_size=32, graph_buckets=(1, 2, 4))
    canary = dataclasses.replace(canary_config(), on_violation=ViolationPolicy.ISOLATE)
    eng = Engine(cfg, canary=canary, journal=True)
    assert eng.guard is not None and eng.journal_feed is not None
    eng.warmup()
    reqs = [eng.submit(list(range(1 + i, 12 + i)), 8) for i in range(2)]
    while any(r.state.value in ("waiting", "prefill") for r in reqs):
        eng.step()
    return eng, reqs


def test_a_decision_failing_two_requests_from_end_step_records_no_step_that_goes_back() -> None:
    eng, (a, b) = _decoding()
    guard, target = eng.guard, eng.canary
    assert guard is not None and target is not None
    s = eng.step_index
    target.step = s + 1  # what CanaryManager.end_step does before it applies its decision (step_index is still s)
    guard.apply(GuardDecision(step=s, events=(), fail=(_failure(a, s), _failure(b, s))))
    assert set(guard.failed) == {a.rid, b.rid}

"""The demo engine's isolate guard keeps the newest ``CanaryConfig.guard_history`` failures and decisions;
the isolate demo and the soak keep every one (their outcomes are computed from them)."""

from __future__ import annotations

import dataclasses

from kvcanary.demo.engine import Engine, EngineConfig
from kvcanary.demo.engine.requests import ReqState
from kvcanary.demo.run import DemoSettings, build_engines
from kvcanary.demo.soak import SoakSettings, canary_config
from kvcanary.guard import GuardDecision, RequestFailure, ViolationPolicy
from tests.demo import harness


def _failure(rid: int, step: int) -> RequestFailure:
    return RequestFailure(request_id=str(rid), code="KVC-G001", check="per_forward_head_k_full", slot=1,
                          position=0, fail_reasons=("K",), step=step, message=f"request {rid} failed")


def test_the_demo_guard_keeps_the_newest_failures_and_decisions() -> None:
    cfg = EngineConfig(num_slots=256, req_rows=6, max_running=5, chunk_size=64, graph_buckets=(1, 2, 4, 8))
    canary = dataclasses.replace(harness.canary_config(), on_violation=ViolationPolicy.ISOLATE, guard_history=2)
    eng = Engine(cfg, canary=canary)
    guard = eng.guard
    assert guard is not None
    eng.warmup()
    reqs = [eng.submit(list(range(1 + i, 12 + i)), 8) for i in range(5)]
    eng.step()
    for r in reqs:  # one decision per request, each failing it
        guard.apply(GuardDecision(step=eng.step_index, events=(), fail=(_failure(r.rid, eng.step_index),)))
    assert all(r.state is ReqState.FAILED for r in reqs)
    assert list(guard.failed) == [reqs[3].rid, reqs[4].rid] and guard.failed.total == 5
    assert [d.fail[0].request_id for d in guard.decisions] == [str(reqs[3].rid), str(reqs[4].rid)]
    assert guard.decisions.total == 5 and guard.decisions.dropped == 3


def test_the_isolate_demo_and_the_soak_keep_every_record() -> None:
    engine, _, _ = build_engines(None, DemoSettings(steps=1), policy=ViolationPolicy.ISOLATE)
    assert engine.guard is not None and engine.guard.failed.limit is None and engine.guard.decisions.limit is None
    assert all(m.decisions.limit is None for m in engine.managers)
    assert canary_config(SoakSettings(policy=ViolationPolicy.ISOLATE)).guard_history is None

"""The demo engine's guard fails every running request that holds a slot a decision quarantined (KVC-G004). No
decision names those, so it reports them to the sinks of the manager whose decision it carries out (the target's
or the draft's), and the monitor counts every request failed (rE)."""

from __future__ import annotations

import dataclasses

import pytest

from kvcanary.demo.engine import Engine, EngineConfig
from kvcanary.demo.engine.requests import ReqState
from kvcanary.guard import GuardDecision, RequestFailure, ViolationPolicy
from kvcanary.guard.codes import QUARANTINED
from kvcanary.monitor import HealthSink
from tests.demo import harness
from tests.manager.test_guard import Recorder


def _failure(rid: int, step: int) -> RequestFailure:
    return RequestFailure(request_id=str(rid), code="KVC-G001", check="per_forward_head_k_full", slot=1,
                          position=0, fail_reasons=("K",), step=step, message=f"request {rid} failed")


@pytest.mark.parametrize("decider", [0, 1], ids=["target", "draft"])
def test_the_requests_failed_for_a_quarantined_slot_reach_the_deciding_managers_sinks(decider: int) -> None:
    cfg = EngineConfig(num_slots=256, req_rows=6, max_running=5, chunk_size=64, graph_buckets=(1, 2, 4, 8),
                       num_draft_tokens=2)
    eng = Engine(cfg, canary=dataclasses.replace(harness.canary_config(), on_violation=ViolationPolicy.ISOLATE))
    guard = eng.guard
    assert guard is not None and len(eng.managers) == 2
    heard = [Recorder(), Recorder()]
    health = HealthSink()
    for m, rec in zip(eng.managers, heard, strict=True):
        m.add_sink(rec)
    eng.managers[decider].add_sink(health)
    eng.warmup()
    a, b, c = (eng.submit(list(range(1 + 20 * i, 12 + 20 * i)), 8) for i in range(3))
    eng.step()
    held = guard.memory.r2t.read(b.row, 0, b.alloc_len)
    slot = held[0]
    decision = GuardDecision(step=eng.step_index, events=(), fail=(_failure(a.rid, eng.step_index),),
                             quarantine=(slot,))
    m = eng.managers[decider]
    m.decisions.append(decision)  # as the manager does before handing its decision over
    health.on_decision(decision)
    guard.apply(decision)
    assert a.state is ReqState.FAILED and b.state is ReqState.FAILED and c.state is not ReqState.FAILED
    assert set(guard.failed) == {a.rid, b.rid} and QUARANTINED.code in guard.failed[b.rid]
    assert heard[1 - decider].decisions == []
    (followup,) = heard[decider].decisions
    (f,) = followup.fail
    assert (f.request_id, f.code, f.slot, f.step, f.message) == (str(b.rid), QUARANTINED.code, slot, decision.step,
                                                                 guard.failed[b.rid])
    assert health.status().requests_failed == guard.failed.total == 2

"""What must stay silent: prefix sharing, padding (row 0 / slot 0), sliding-window eviction, the draft offset,
speculative rollback with slot reuse, eviction, retract/resume, aborts, PD transfers; and the canary must
not change what the engine computes."""

from __future__ import annotations

import pytest

from kvcanary.consts import CanaryMode
from kvcanary.demo.engine import Engine, EngineConfig, Fault, FaultInjector, ReqState, drive, shared_prefix_workload
from tests.demo.harness import STEPS, canary_config, clean_run, engine_pair, spec_config


def test_clean_workload_exercises_every_legitimate_case_silently() -> None:
    engine, peer = clean_run()
    assert engine.events() == [] and peer.events() == []
    reqs = list(engine.requests.values())
    assert any(r.match_len > 0 for r in reqs), "no prefix hit"
    assert engine.memory.tree is not None and engine.memory.tree.evicted_slots > 0, "no eviction"
    assert any(r.state is ReqState.ABORTED for r in reqs)
    assert any(r.remote_prefill and r.num_outputs > 1 for r in reqs), "no PD request decoded"
    assert any(r.swa_evicted_upto > 0 for r in reqs), "no sliding-window eviction"
    swa = engine.memory.swa
    assert swa is not None and any(swa.host_lut[f] not in (0, f) for f in range(1, 50)), "identity translation"
    # slot 0 and row 0 were used by padding rows, and by nothing else
    assert engine.canary is not None and engine.canary.step == STEPS


def test_graph_padding_rows_write_slot_0_silently() -> None:
    engine, _ = engine_pair()
    log = drive(engine, shared_prefix_workload(steps=20), 20)
    assert sum(r.padded_rows for r in log.reports) > 0
    engine.flush_canaries()
    assert engine.events() == []


def test_speculative_decoding_with_rollback_and_slot_reuse_is_silent() -> None:
    engine = Engine(spec_config(), canary=canary_config())
    engine.warmup()
    drive(engine, shared_prefix_workload(steps=30, remote_prefill=False), 30)
    engine.flush_canaries()
    d = engine.draft
    assert d is not None and engine.draft_canary is not None
    assert engine.draft_canary.pool.kv_token_id_vs_position_offset == 1
    assert d.rollbacks > 0 and 0 < d.accepted_tokens < d.proposed_tokens
    tree = engine.memory.tree
    assert tree is not None
    cached = set(tree.sweep_entries().slots.tolist())
    assert cached & set(d.recently_rejected), "no rejected draft slot was reused"
    assert engine.events() == []
    assert {e.tag.name for e in engine.draft_canary.endpoints} >= {"HEAD_K_FULL", "TAIL_V_FULL", "SWEEP_K_FULL"}


def test_eagle_style_position_bug_is_caught_on_the_draft_pool_first() -> None:
    """The EAGLE positions bug: positions advanced before the draft decodes; the draft's write chain check fires."""
    engine = Engine(spec_config(), canary=canary_config(), faults=FaultInjector(Fault.POSITION_OFF_BY_ONE))
    engine.warmup()
    drive(engine, shared_prefix_workload(steps=12, remote_prefill=False), 12)
    engine.flush_canaries()
    assert engine.faults.firings
    assert engine.draft_canary is not None and engine.draft_canary.events
    first = engine.draft_canary.events[0].violation
    assert first.tag_name == "HEAD_K_FULL" and first.reason_labels == ["write_position"]
    assert engine.canary is not None and engine.canary.events  # the target's verify sees it too


def test_no_prefix_cache_engine_is_silent() -> None:
    cfg = EngineConfig(num_slots=512, req_rows=9, max_running=8, chunk_size=32, prefix_cache=False)
    engine = Engine(cfg, canary=canary_config())
    engine.warmup()
    drive(engine, shared_prefix_workload(steps=25, remote_prefill=False), 25)
    engine.flush_canaries()
    assert engine.events() == []


def test_the_canary_does_not_change_what_the_engine_computes() -> None:
    outputs = []
    for canary in (None, canary_config()):
        cfg = EngineConfig(num_slots=192, req_rows=9, max_running=8, chunk_size=32, swa_window=8,
                           graph_buckets=(1, 2, 4, 8))
        engine = Engine(cfg, canary=canary)
        engine.warmup()
        drive(engine, shared_prefix_workload(steps=25, remote_prefill=False), 25)
        outputs.append({rid: list(r.tokens) for rid, r in engine.requests.items()})
    assert outputs[0] == outputs[1]


def test_raise_mode_fails_the_step() -> None:
    engine, _ = engine_pair(canary=canary_config(CanaryMode.RAISE), fault=Fault.KV_FLIP_USED)
    with pytest.raises(RuntimeError, match=r"^kv_canary violation: launch_tag=TAIL_K_FULL fail_reason=verify_real_kv"):
        drive(engine, shared_prefix_workload(steps=10), 10)

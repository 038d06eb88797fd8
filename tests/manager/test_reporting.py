"""Host side: the one-step-late pump, log and raise modes, the report format, the stats line, health."""

from __future__ import annotations

import logging
import re

import pytest

from kvcanary.consts import CanaryLaunchTag, CanaryMode, RealKvHashMode
from kvcanary.manager import CanaryConfig
from tests.manager.world import Req, World, make_world

FIRST_LINE = re.compile(
    r"kv_canary violation: launch_tag=(?P<tag>[A-Z_]+) fail_reason=(?P<reasons>[a-z_+]+) slot_idx=(?P<slot>-?\d+) "
    r"position=-?\d+ stored_token=-?\d+ expected_token=-?\d+ stored_chain_hash=0x[0-9a-f]{16} "
    r"expected_aux=0x[0-9a-f]{16}$")


def corrupt_world(mode: CanaryMode) -> tuple[World, Req]:
    w = make_world(config=CanaryConfig(mode=mode, real_kv_mode=RealKvHashMode.ALL, health_warmup_steps=1000))
    a = Req(1, list(range(100, 112)), list(range(1, 9)))
    w.forward([(a, 0, 8)])
    w.step()  # step 0: snapshot taken, nothing to report yet
    w.k[2] += 1.0
    return w, a


def test_violations_reach_the_host_one_step_later() -> None:
    w, a = corrupt_world(CanaryMode.LOG)
    w.forward([(a, 8, 0)])  # step 1 records the violation on the device
    w.step()
    assert w.manager.events == []  # step 1's copy is read at step 2
    w.forward([(a, 8, 0)])
    w.step()
    ev = w.manager.events
    assert ev and ev[0].step_recorded == 1 and ev[0].step_pumped == 2
    assert "step_when_pumped=2" in ev[0].message


def test_log_mode_logs_every_row_in_the_reference_format(caplog: pytest.LogCaptureFixture) -> None:
    w, a = corrupt_world(CanaryMode.LOG)
    with caplog.at_level(logging.WARNING, logger="kvcanary.manager"):
        w.forward([(a, 8, 0)])
        w.step()
        w.step()
    messages = [r.getMessage() for r in caplog.records if r.getMessage().startswith("kv_canary violation")]
    assert len(messages) == 1
    lines = messages[0].splitlines()
    m = FIRST_LINE.match(lines[0])
    assert m and m["tag"] == "TAIL_K_FULL" and m["reasons"] == "verify_real_kv_hash" and m["slot"] == "2"
    assert lines[1] == "KV cache canary violation detected (kernel_kind=TAIL_K_FULL, slot_idx=2, position=1)"
    assert lines[2] == "canary_kind:       per_forward_tail_k_full"
    assert lines[3] == "  fail_reasons: verify_real_kv_hash"
    assert lines[-1].startswith("  total_violations=1 ring_overflow=False step_when_pumped=")


def test_raise_mode_raises_once_with_every_new_report() -> None:
    w, a = corrupt_world(CanaryMode.RAISE)
    w.forward([(a, 8, 0)])
    w.step()
    with pytest.raises(RuntimeError) as info:
        w.step()
    assert FIRST_LINE.match(str(info.value).splitlines()[0])
    w.k[3] += 1.0
    w.forward([(a, 8, 0)])
    w.step()
    w.step()  # already raised: later violations are recorded, not raised again
    assert len(w.manager.events) >= 2


def test_stats_line() -> None:
    w, a = corrupt_world(CanaryMode.LOG)
    w.forward([(a, 8, 0)])
    w.step()
    stats = w.manager.end_step()
    assert re.fullmatch(r"\[canary\] step=\d+ protected_tokens=\d+ sweep_passes=0 violations=1 "
                        r"launch_tags_active=2/2", stats.line()), stats.line()
    assert stats.protected_tokens > 0


def test_health_check_fails_when_the_canary_stops_running() -> None:
    """An engine whose forward wrapper was lost: steps happen, no canary launch does."""
    w = make_world(config=CanaryConfig(sweep_interval=0, health_warmup_steps=3, health_every=1))
    for _ in range(3):
        w.step()
    with pytest.raises(RuntimeError) as info:
        w.step()
    assert str(info.value) == (
        "kv-canary: kernel_run_counter is zero after warmup for tags=[HEAD_K_FULL, TAIL_K_FULL] at step=3; "
        "canary path is not executing")


def test_health_check_fails_when_the_canary_stops_after_running(monkeypatch: pytest.MonkeyPatch) -> None:
    """The canary ran, then its launches stopped reaching the device (a wrapper lost inside a forward, a
    compiled graph without them) while the engine still called head and tail: the counters stop growing."""
    w = make_world(config=CanaryConfig(sweep_interval=0, health_warmup_steps=2, health_every=2))
    a = Req(1, list(range(100, 112)), list(range(1, 5)))
    for _ in range(4):  # steps 0-3; the check at step 2 (snapshot 1) and at step 4 (snapshot 3) see growth
        w.forward([(a, 0, 4)])
        w.step()
    runner = w.manager._forwards[0]
    monkeypatch.setattr(runner, "_head_launches", lambda v, bs: None)
    monkeypatch.setattr(runner, "_tail_launches", lambda v: None)
    w.forward([(a, 0, 4)])
    w.step()  # step 4 checks snapshot 3: still growing
    w.forward([(a, 0, 4)])
    w.step()
    with pytest.raises(RuntimeError) as info:
        w.step()  # step 6 checks snapshot 5: no growth since snapshot 3, two forwards issued
    assert str(info.value) == (
        "kv-canary: kernel_run_counter has not advanced for tags=[HEAD_K_FULL, TAIL_K_FULL] from step=3 to step=5, "
        "over 2 launches issued; canary path is not executing")


def test_health_check_is_silent_while_the_engine_is_idle() -> None:
    """Steps without a forward issue nothing: counters that do not grow then are no stall."""
    w = make_world(config=CanaryConfig(sweep_interval=0, health_warmup_steps=2, health_every=1))
    a = Req(1, list(range(100, 112)), list(range(1, 5)))
    for _ in range(3):
        w.forward([(a, 0, 4)])
        w.step()
    for _ in range(6):
        w.step()
    w.forward([(a, 0, 4)])
    for _ in range(3):
        w.step()
    assert w.manager.health.checks >= 9


def test_health_check_passes_while_running_and_covers_sweep_tags() -> None:
    w = make_world(config=CanaryConfig(sweep_interval=1, enable_v=True, health_warmup_steps=2, health_every=1))
    assert CanaryLaunchTag.SWEEP_V_FULL in w.manager.active_tags
    a = Req(1, list(range(100, 112)), list(range(1, 5)))
    for _ in range(2):
        w.forward([(a, 0, 4)])
        w.step()  # no sweep source attached: the sweep never runs
    w.forward([(a, 0, 4)])
    with pytest.raises(RuntimeError, match=r"tags=\[SWEEP_K_FULL, SWEEP_V_FULL\]"):
        w.step()
    w2 = make_world(config=CanaryConfig(sweep_interval=1, health_warmup_steps=2, health_every=1))
    from tests.manager.world import chain_entries

    w2.manager.set_sweep_source(lambda: chain_entries([a]))
    for _ in range(5):
        w2.forward([(a, 0, 4)])
        w2.step()
    assert w2.manager.health.checks >= 2


def test_raise_mode_still_ends_the_step_it_raises_in() -> None:
    """The step counter (step_when_pumped, health and sweep schedules) does not fall behind after a raise."""
    w = make_world(config=CanaryConfig(mode=CanaryMode.RAISE, real_kv_mode=RealKvHashMode.ALL,
                                       health_warmup_steps=1000))
    a = Req(1, list(range(100, 112)), list(range(1, 9)))
    w.forward([(a, 0, 8)])
    w.step()
    w.k[2] += 1.0
    w.forward([(a, 8, 0)])
    calls, raised = 0, 0
    for _ in range(5):
        calls += 1
        try:
            w.step()
        except RuntimeError:
            raised += 1
    assert raised == 1 and w.manager.step == calls + 1


def test_negative_expected_token_lengths_are_refused() -> None:
    import torch

    from kvcanary.manager import CanaryBatch, ExpectedTokens

    w = make_world()
    t = torch.tensor
    with pytest.raises(ValueError, match=r"ExpectedTokens.lens must be >= 0"):
        w.manager.prepare(CanaryBatch(
            req_pool_indices=t([1, 2]), prefix_lens=t([8, 8]), extend_lens=t([0, 0]),
            input_ids=t([], dtype=torch.int64), positions=t([], dtype=torch.int64),
            out_cache_loc=t([], dtype=torch.int64),
            expected_tokens=ExpectedTokens(flat=t(list(range(100, 112))), lens=t([-4, 16]))))

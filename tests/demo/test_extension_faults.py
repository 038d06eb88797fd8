"""The extension-only bug classes: missed with kvcanary.Extensions off, caught with them on (the demo's rows)."""

from __future__ import annotations

import dataclasses
from functools import cache

import pytest

from kvcanary.consts import FailReason
from kvcanary.demo import DemoSettings, RunOutcome, run_one
from kvcanary.demo.engine import Engine, demo_engine_config, drive, shared_prefix_workload
from kvcanary.demo.engine.faults import EXTENSION_FAULTS, Fault
from kvcanary.demo.run import DRAFT_TOKENS
from kvcanary.extensions import Extensions
from tests.demo.harness import STEPS, canary_config

BIT = {Fault.PREFIX_MISS_ZERO_ROW: int(FailReason.ZERO_SLOT_IN_LIVE_RANGE),
       Fault.NULL_BLOCK_IN_WINDOW: int(FailReason.ZERO_SLOT_IN_LIVE_RANGE),
       Fault.DRAFT_PAST_ALLOCATION: int(FailReason.WRITE_SLOT_MISMATCH)}
ON = Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True)


@cache
def _run(fault: Fault, extensions: bool) -> RunOutcome:
    return run_one(fault, DemoSettings(steps=STEPS), extensions=extensions)


def test_every_extension_class_names_its_bit() -> None:
    assert set(BIT) == EXTENSION_FAULTS


@pytest.mark.parametrize("fault", sorted(EXTENSION_FAULTS), ids=lambda f: f.value)
def test_missed_with_extensions_off(fault: Fault) -> None:
    o = _run(fault, False)
    assert o.error is None and o.fired_step is not None
    assert o.events == () and o.ok and o.expect_missed


@pytest.mark.parametrize("fault", sorted(EXTENSION_FAULTS), ids=lambda f: f.value)
def test_caught_with_extensions_on_in_the_same_step(fault: Fault) -> None:
    o = _run(fault, True)
    assert o.error is None and o.fired_step is not None and o.ok
    first = o.events[0]
    assert first.violation.fail_reason_bits == BIT[fault], first.violation.reason_labels
    assert first.step_recorded == o.fired_step
    assert all(e.violation.fail_reason_bits == BIT[fault] for e in o.events)


def test_clean_runs_with_extensions_on_are_silent() -> None:
    assert run_one(None, DemoSettings(steps=STEPS), extensions=True).events == ()
    cfg = dataclasses.replace(demo_engine_config(), num_draft_tokens=DRAFT_TOKENS, swa_window=0)
    engine = Engine(cfg, canary=dataclasses.replace(canary_config(), extensions=ON))
    engine.warmup()
    drive(engine, shared_prefix_workload(steps=STEPS, remote_prefill=False), STEPS)
    engine.flush_canaries()
    assert engine.events() == []

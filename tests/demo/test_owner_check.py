"""The write-time owner check through CanaryConfig on the demo engine: the manager's owner map, fed by the
engine's journal, catches a double allocation at the second owner's write and stays silent on everything
legitimate (prefix sharing, eviction, retracts, aborts, PD transfers, the sliding window, speculative
decoding with rollback and slot reuse)."""

from __future__ import annotations

import dataclasses

from kvcanary.consts import FailReason
from kvcanary.demo.engine import Engine, Fault, drive, shared_prefix_workload
from kvcanary.extensions import Extensions
from kvcanary.manager import CanaryConfig
from tests.demo.harness import STEPS, canary_config, engine_pair, spec_config

OWN = int(FailReason.WRITE_SLOT_OWNER_MISMATCH)


def _owner_config() -> CanaryConfig:
    return dataclasses.replace(canary_config(), extensions=Extensions(write_slot_owner_mismatch=True))


def test_clean_workload_is_silent_with_the_owner_check_on() -> None:
    engine, peer = engine_pair(canary=_owner_config())
    drive(engine, shared_prefix_workload(steps=STEPS), STEPS)
    engine.flush_canaries()
    peer.flush_canaries()
    assert engine.journal_feed is not None and peer.journal_feed is not None
    assert engine.events() == [] and peer.events() == []
    m = engine.canary
    assert m is not None and m.owners is not None
    assert int((m.owners.slot_owner(m.groups[0].kind) >= 0).sum()) > 0, "no slot was ever claimed"
    assert m.journal.recorded > 0


def test_speculative_decoding_is_silent_with_the_owner_check_on() -> None:
    engine = Engine(spec_config(), canary=_owner_config())
    engine.warmup()
    drive(engine, shared_prefix_workload(steps=30, remote_prefill=False), 30)
    engine.flush_canaries()
    d = engine.draft
    assert d is not None and d.rollbacks > 0
    assert engine.draft_canary is not None and engine.draft_canary.owners is not None
    assert engine.events() == []


def test_double_allocation_is_caught_at_the_write_naming_both_rows() -> None:
    engine, _ = engine_pair(canary=_owner_config(), fault=Fault.DOUBLE_ALLOC)
    drive(engine, shared_prefix_workload(steps=STEPS), STEPS)
    engine.flush_canaries()
    assert engine.faults.firings
    events = engine.events()
    assert events
    first = min(e.step_recorded for e in events)
    owner_rows = [e for e in events if e.violation.fail_reason_bits & OWN]
    assert owner_rows, "the owner check did not fire"
    # the owner check is the first to see it: at the second owner's write, before anything reads the slot
    assert min(e.step_recorded for e in owner_rows) == first
    for e in owner_rows:
        owners = e.violation.owners
        assert owners is not None
        writer, holder = owners
        assert writer > 0 and holder > 0 and writer != holder, (writer, holder)
    # without the check the same run is caught later, by a read of the overwritten slot
    plain, _ = engine_pair(fault=Fault.DOUBLE_ALLOC)
    drive(plain, shared_prefix_workload(steps=STEPS), STEPS)
    plain.flush_canaries()
    assert plain.events() and min(e.step_recorded for e in plain.events()) > first

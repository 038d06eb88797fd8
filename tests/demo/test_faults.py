"""Every fault class the demo engine injects is detected, by the check expected for it, and only after it happened."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvcanary.consts import FailReason
from kvcanary.demo.engine import Fault
from kvcanary.demo.engine.faults import CORE_FAULTS, EXTENSION_FAULTS
from tests.demo.harness import demo_run

CHAIN = int(FailReason.VERIFY_CHAIN_HASH_MISMATCH)
POS = int(FailReason.VERIFY_POSITION_MISMATCH)
RKV = int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)
TOK = int(FailReason.VERIFY_TOKEN_MISMATCH)
WPOS = int(FailReason.WRITE_POSITION_MISMATCH)


@dataclass(frozen=True)
class Expect:
    first_tags: frozenset[str]  # the launch tag of the first violation is one of these
    first_bits: int  # ... and its reason bits include these
    only_bits: int | None = None  # every violation's bits are exactly this (content bugs)
    tag_suffix: str | None = None  # every violation is on this group ("_SWA") or half
    max_lag: int = 10


EXPECT: dict[Fault, Expect] = {
    # lifetime / ownership: a slot re-owned while something still names it -> chain + position
    Fault.RADIX_UAF: Expect(frozenset({"HEAD_K_FULL", "SWEEP_K_FULL"}), CHAIN | POS),
    Fault.DOUBLE_ALLOC: Expect(frozenset({"HEAD_K_FULL", "SWEEP_K_FULL"}), CHAIN | POS),
    # addressing
    Fault.WRONG_CACHE_LOC: Expect(frozenset({"HEAD_K_FULL"}), CHAIN | POS),
    Fault.ROW_RECYCLED: Expect(frozenset({"HEAD_K_FULL"}), TOK),
    Fault.POSITION_OFF_BY_ONE: Expect(frozenset({"HEAD_K_FULL"}), WPOS, max_lag=0),
    Fault.STALE_SWA_TRANSLATION: Expect(frozenset({"HEAD_K_SWA", "TAIL_K_SWA", "SWEEP_K_SWA"}), CHAIN,
                                        tag_suffix="_SWA"),
    # content: only the real-KV fingerprint can see these
    Fault.PADDING_ROW_WRITE: Expect(frozenset({"TAIL_K_FULL", "SWEEP_K_FULL"}), RKV, only_bits=RKV, max_lag=2),
    Fault.KV_FLIP_USED: Expect(frozenset({"TAIL_K_FULL"}), RKV, only_bits=RKV, tag_suffix="_K_FULL", max_lag=0),
    Fault.KV_FLIP_CACHED: Expect(frozenset({"SWEEP_K_FULL"}), RKV, only_bits=RKV, max_lag=2),
    Fault.CORRUPTED_TRANSFER: Expect(frozenset({"TAIL_K_FULL"}), RKV, only_bits=RKV, max_lag=1),
}


def test_every_fault_class_has_an_expectation() -> None:
    assert set(EXPECT) == set(CORE_FAULTS) and set(CORE_FAULTS) | EXTENSION_FAULTS == set(Fault)


def test_the_clean_run_is_silent() -> None:
    o = demo_run(None)
    assert o.error is None and o.events == () and o.peer_violations == 0
    assert o.protected_tokens > 10_000 and o.sweep_passes == 20


@pytest.mark.parametrize("fault", CORE_FAULTS, ids=lambda f: f.value)
def test_fault_is_detected_by_the_expected_check(fault: Fault) -> None:
    o = demo_run(fault)
    exp = EXPECT[fault]
    assert o.error is None, o.error
    assert o.fired_step is not None, "the buggy code path never ran"
    assert o.events, f"{fault.value} was not detected"
    first = o.events[0]
    v = first.violation
    assert v.tag_name in exp.first_tags, (v.tag_name, v.reason_labels)
    assert v.fail_reason_bits & exp.first_bits == exp.first_bits, v.reason_labels
    assert o.fired_step <= first.step_recorded <= o.fired_step + exp.max_lag
    if exp.only_bits is not None:
        assert {e.violation.fail_reason_bits for e in o.events} == {exp.only_bits}
    if exp.tag_suffix is not None:
        assert all(e.violation.tag_name.endswith(exp.tag_suffix) for e in o.events), o.tags


def test_position_bug_is_then_seen_by_every_later_verify() -> None:
    o = demo_run(Fault.POSITION_OFF_BY_ONE)
    assert any(e.violation.fail_reason_bits == POS for e in o.events)


def test_a_k_only_corruption_leaves_the_v_half_silent() -> None:
    assert not any("_V_" in t for t in demo_run(Fault.KV_FLIP_USED).tags)


def test_a_corrupted_transfer_is_seen_on_the_decode_side_only_after_the_kv_arrives() -> None:
    o = demo_run(Fault.CORRUPTED_TRANSFER)
    assert o.peer_violations == 0
    assert not any(t.startswith("HEAD") for t in o.tags)  # the records themselves travelled intact
    assert {"TAIL_K_FULL", "TAIL_V_FULL"} <= set(o.tags)

"""Decoded violations and SGLang's report text (its first line is parsed by regex: it is frozen)."""

from __future__ import annotations

import re

import torch

import kvcanary as kc
from kvcanary.violations import canary_kind, tag_name

FIRST_LINE = re.compile(
    r"kv_canary violation: launch_tag=(\w+|unknown\(\d+\)) fail_reason=([\w+]+) slot_idx=(-?\d+) position=(-?\d+) "
    r"stored_token=(-?\d+) expected_token=(-?\d+) stored_chain_hash=(0x[0-9a-f]{16}) expected_aux=(0x[0-9a-f]{16})$")


def test_verify_row_report() -> None:
    bits = int(kc.FailReason.VERIFY_CHAIN_HASH_MISMATCH | kc.FailReason.VERIFY_POSITION_MISMATCH)
    v = kc.Violation.from_row([int(kc.CanaryLaunchTag.TAIL_K_FULL), 4, 3, 103, -1, -5, 17, bits])
    assert v.stored_chain_hash == 2**64 - 5 and v.reason_labels == ["verify_chain_hash", "verify_position"]
    text = kc.format_violation(v, total_violations=2, ring_capacity=64, step_when_pumped=9).splitlines()
    m = FIRST_LINE.match(text[0])
    assert m and m.group(1) == "TAIL_K_FULL" and m.group(2) == "verify_chain_hash+verify_position"
    assert text[1] == "KV cache canary violation detected (kernel_kind=TAIL_K_FULL, slot_idx=4, position=3)"
    assert text[2] == "canary_kind:       per_forward_tail_k_full"
    assert text[3] == "  fail_reasons: verify_chain_hash verify_position"
    assert text[4] == "  stored:   token_id=103   position=3 prev_hash=0xfffffffffffffffb"
    assert text[5] == "  expected: prev_hash=0x0000000000000011"
    assert text[6] == "  total_violations=2 ring_overflow=False step_when_pumped=9"


def test_token_and_write_rows() -> None:
    tok = kc.Violation.from_row([10, 5, 1, 7, 8, 0, 0, int(kc.FailReason.VERIFY_TOKEN_MISMATCH)])
    lines = kc.format_violation(tok, total_violations=3, ring_capacity=2, step_when_pumped=0).splitlines()
    assert lines[2] == "canary_kind:       sweep_k_swa"
    assert lines[5] == "  expected: token_id=8 prev_hash=0x0000000000000000"
    assert lines[6].endswith("ring_overflow=True step_when_pumped=0")
    w = kc.Violation.from_row([2, 9, 12, 5, 5, 99, 11, int(kc.FailReason.WRITE_POSITION_MISMATCH)])
    assert w.is_write_row
    lines = kc.format_violation(w, total_violations=1, ring_capacity=8, step_when_pumped=1).splitlines()
    assert lines[4] == "  actual:   token_id=5   position=12 prev_hash=0x0000000000000063"
    assert lines[5] == "  expected: token_id=5   position=11"


def test_owner_rows_name_the_writer_and_the_holder() -> None:
    bit = int(kc.FailReason.WRITE_SLOT_OWNER_MISMATCH)
    held = {3: "req_pool_idx=3", -1: "free", -4: "read-only (-4)"}
    for holder, text in held.items():
        v = kc.Violation.from_row([int(kc.CanaryLaunchTag.TAIL_V_SWA), 40, 6, 7, 2, -9, holder, bit])
        assert v.owners == (2, holder) and v.reason_labels == ["write_slot_owner"] and not v.is_write_row
        lines = kc.format_violation(v, total_violations=1, ring_capacity=8, step_when_pumped=4).splitlines()
        m = FIRST_LINE.match(lines[0])
        assert m and m.group(2) == "write_slot_owner" and m.group(6) == "2"
        assert lines[4] == "  written:  token_id=7   position=6 prev_hash=0xfffffffffffffff7 by req_pool_idx=2"
        assert lines[5] == f"  held by:  {text}"
    assert kc.Violation.from_row([2, 9, 12, 5, 5, 99, 11, int(kc.FailReason.WRITE_SLOT_MISMATCH)]).owners is None


def test_unknown_tag_and_no_bits() -> None:
    v = kc.Violation.from_row([42, 1, 0, 0, 0, 0, 0, 0])
    assert tag_name(42) == "unknown(42)" and canary_kind(42) == "unknown(42)"
    first = kc.format_violation(v, total_violations=1, ring_capacity=1, step_when_pumped=0).splitlines()[0]
    assert "launch_tag=unknown(42) fail_reason=none" in first and FIRST_LINE.match(first)


def test_violation_log_reads_fill_once_ring() -> None:
    log = kc.ViolationLog.allocate(ring_capacity=2, device="cpu")
    log.violation_ring[0] = torch.tensor([0, 1, 0, 0, 0, 0, 0, 1])
    log.violation_ring[1] = torch.tensor([0, 2, 0, 0, 0, 0, 0, 2])
    log.violation_write_index[0] = 5
    snap = log.read()
    assert snap.total == 5 and snap.overflowed and snap.dropped == 3
    assert [v.slot_idx for v in snap.violations] == [1, 2]
    log.reset_()
    assert log.read().total == 0

"""Hand-written cases: each FailReason bit fires alone when it should, and the silent cases stay silent."""

from __future__ import annotations

import torch

import kvcanary as kc
from kvcanary.hashing import ANCHOR_HASH, record_hash, to_int64
from tests.backends.torch_ref._world import World, bits

F = kc.FailReason
CHAIN, POS, RKV, WTOK, WPOS, VTOK, OOB = (int(F.VERIFY_CHAIN_HASH_MISMATCH), int(F.VERIFY_POSITION_MISMATCH),
                                         int(F.VERIFY_REAL_KV_HASH_MISMATCH), int(F.WRITE_TOKEN_MISMATCH),
                                         int(F.WRITE_POSITION_MISMATCH), int(F.VERIFY_TOKEN_MISMATCH),
                                         int(F.INDEX_OUT_OF_RANGE))
SLOTS = [3, 7, 2, 9, 5]
TOKS = [11, 22, 33, 44, 55]


def chain_world(**kw: object) -> World:
    w = World(**kw)  # type: ignore[arg-type]
    w.write([(-1, SLOTS, TOKS, list(range(5)))])
    assert w.take() == []
    return w


def entries() -> list[tuple[int, int, int, int]]:
    """Verify entries of the whole chain :func:`chain_world` writes: ``(slot, predecessor, position, token)``."""
    return [(s, SLOTS[k - 1] if k else -1, k, TOKS[k]) for k, s in enumerate(SLOTS)]


def test_written_records_follow_the_format() -> None:
    w = chain_world()
    h = ANCHOR_HASH
    for k, s in enumerate(SLOTS):
        tok, pos, prev, _ = w.records[s, :4].tolist()
        assert (tok, pos, prev) == (TOKS[k], k, to_int64(h))
        h = record_hash(h, TOKS[k], k)
    assert int(w.ctx.slot_run_counter[0]) == 5 and int(w.ctx.kernel_run_counter[0]) == 1


def test_clean_chain_and_anchor_head_are_silent() -> None:
    w = chain_world()
    w.verify(entries(), check=True)
    w.verify([(3, -1, 0, 11)])
    assert w.take() == []


def test_corrupt_predecessor_token_is_a_chain_mismatch_on_its_successor() -> None:
    w = chain_world()
    w.records[2, 0] += 1  # token of the slot at position 2
    w.verify([(9, 2, 3, -1)])
    assert bits(w.take()) == [CHAIN]


def test_position_mismatch_alone() -> None:
    w = chain_world()
    w.verify([(7, 3, 5, -1)])
    (v,) = w.take()
    assert v.fail_reason_bits == POS and v.position == 1 and v.slot_idx == 7


def test_bogus_prev_hash_alone() -> None:
    w = chain_world()
    w.records[9, 2] ^= 1
    w.verify([(9, 2, 3, -1)])
    (v,) = w.take()
    assert v.fail_reason_bits == CHAIN
    assert v.expected_aux == record_hash(int(w.records[2, 2]), 33, 2)


def test_real_kv_flip_alone_and_window() -> None:
    w = chain_world()
    w.kv[5, 31] ^= 0xFF
    w.verify([(5, 9, 4, -1)])
    assert bits(w.take()) == [RKV]
    p = chain_world(mode=kc.RealKvHashMode.PARTIAL)
    p.kv[5, 20] ^= 0xFF  # past the 16 bytes PARTIAL hashes
    p.verify([(5, 9, 4, -1)])
    assert p.take() == []
    p.kv[5, 3] ^= 0xFF
    p.verify([(5, 9, 4, -1)])
    assert bits(p.take()) == [RKV]


def test_none_mode_stores_zero_and_never_flags_real_kv() -> None:
    w = chain_world(mode=kc.RealKvHashMode.NONE)
    assert (w.records[SLOTS, 3] == 0).all()
    w.kv.fill_(1)
    w.verify(entries())
    assert w.take() == []


def test_token_check() -> None:
    w = chain_world()
    e = entries()
    e[1] = (7, 3, 1, 99)
    w.verify(e, check=True)
    (v,) = w.take()
    assert v.fail_reason_bits == VTOK and v.expected_token == 99 and v.stored_token == 22
    w.verify(e, check=False)  # check off: expected tokens are ignored and reported as -1
    assert w.take() == []
    e[1] = (7, 3, 1, -1)
    w.verify(e, check=True)
    assert w.take() == []


def test_slot_zero_and_prev_zero() -> None:
    w = chain_world()
    w.records[0] = 12345
    w.verify([(0, 3, 9, 1)], check=True)  # slot 0 is never verified
    w.records[9, 2] ^= 1
    w.verify([(9, 0, 3, -1)])  # predecessor 0: no chain check
    assert w.take() == []
    assert int(w.ctx.slot_run_counter[0]) == 5 + 2  # slot-0 entries still count as processed


def test_zeroed_record_is_caught() -> None:
    w = chain_world()
    w.records[7] = 0
    w.verify([(7, 3, 1, -1)])
    (v,) = w.take()
    assert v.fail_reason_bits & POS and v.fail_reason_bits & CHAIN and v.fail_reason_bits & RKV


def test_write_input_assert_rows() -> None:
    w = World()
    w.write([(-1, [4, 6], [1, 2], [0, 1])], expected=([1, 3], [0, 5]))
    (v,) = w.take()
    assert v.fail_reason_bits == WTOK | WPOS and v.slot_idx == 6
    assert (v.stored_token, v.expected_token, v.position) == (2, 3, 1)
    assert v.expected_aux == 5 and v.is_write_row
    assert w.records[6, 0].item() == 2, "stored even after a violation"


def test_chain_position_assert() -> None:
    w = chain_world()
    w.write([(5, [10, 11], [66, 77], [5, 7])])  # 7 should be 6
    (v,) = w.take()
    assert v.fail_reason_bits == WPOS and v.slot_idx == 11 and v.expected_aux == 6 and v.expected_token == 77
    w.write([(5, [12], [1], [9])])
    assert bits(w.take()) == [WPOS]
    off = chain_world(cpa=0)
    off.write([(5, [12], [1], [9])])
    assert off.take() == []
    w.write([(-1, [13], [1], [9])])  # a chain head has nothing to compare with
    assert w.take() == []


def test_skipped_tokens_neither_advance_the_chain_nor_count() -> None:
    w = chain_world()
    w.write([(5, [-1, 10, -1, 11], [0, 66, 0, 77], [0, 5, 0, 6])])
    assert w.take() == []
    assert int(w.ctx.slot_run_counter[0]) == 5 + 2
    w.verify([(10, 5, 5, -1), (11, 10, 6, -1)])
    assert w.take() == []


def test_ring_fills_once_and_counts_overflow() -> None:
    w = chain_world()
    w.ctx.violation_ring.zero_()
    w.verify([(s, -1, 100 + k, -1) for k, s in enumerate(SLOTS)] * 1)
    n = int(w.ctx.violation_write_index[0])
    assert n == 5
    small = chain_world(ring=2)
    small.verify([(s, -1, 100 + k, -1) for k, s in enumerate(SLOTS)])
    assert int(small.ctx.violation_write_index[0]) == 5
    assert [r[1] for r in small.ctx.violation_ring.tolist()] == SLOTS[:2], "row 0 is forever the first violation"
    small.verify([(3, -1, 100, -1)])
    assert int(small.ctx.violation_write_index[0]) == 6
    assert [r[1] for r in small.ctx.violation_ring.tolist()] == SLOTS[:2]


def test_disabled_and_clamped_plans() -> None:
    w = chain_world()
    bad = [(3, -1, 50, -1)]
    w.verify(bad, enable=0)
    assert w.take() == [] and int(w.ctx.kernel_run_counter[0]) == 2 and int(w.ctx.slot_run_counter[0]) == 5
    w.verify(bad, num_valid=-4)
    w.verify(bad, num_valid=0)
    assert w.take() == [] and int(w.ctx.slot_run_counter[0]) == 5
    w.verify(bad, num_valid=9)  # clamped to the capacity (1)
    assert bits(w.take()) == [POS] and int(w.ctx.slot_run_counter[0]) == 6
    w.verify(bad, enable=2)  # any non-zero enable runs
    assert bits(w.take()) == [POS]


def test_counters_count_every_launch() -> None:
    w = World()
    w.write([(-1, [], [], [])])
    w.verify([])
    assert int(w.ctx.kernel_run_counter[0]) == 2 and int(w.ctx.slot_run_counter[0]) == 0


def test_write_num_valid_beyond_filled_offsets_writes_nothing() -> None:
    w = World()
    plan = kc.WritePlan(write_offsets=torch.tensor([0, 2, 0, 0]), write_seed_slot_indices=torch.tensor([-1, -1, -1]),
                        write_num_valid_reqs=torch.tensor([3], dtype=torch.int32))
    z = torch.tensor([1, 2], dtype=torch.int64)
    kc.launch_canary_write_kernel(context=w.ctx, plan=plan, input_ids=z, positions=z, out_cache_loc=z,
                                  enable_write_input_assert=False, expected_input_tokens=None,
                                  expected_input_positions=None)
    assert int(w.ctx.slot_run_counter[0]) == 0 and (w.records == 0).all()

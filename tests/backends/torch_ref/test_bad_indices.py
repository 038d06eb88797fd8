"""kvcanary's one behaviour for bad device data: no out-of-bounds access, INDEX_OUT_OF_RANGE rows instead.

These pin the choices every backend must follow; SGLang's backends disagree (raise, clamp, or read out of
bounds). See docs/compatibility.md, Bad indices.
"""

from __future__ import annotations

from typing import Any

import torch

import kvcanary as kc
from kvcanary.testing import calls
from tests.backends.torch_ref._world import World, bits
from tests.backends.torch_ref.test_hand import CHAIN, OOB, POS, chain_world

INVALID = kc.INVALID_SLOT


def test_verify_slot_outside_the_buffer() -> None:
    w = chain_world()
    w.verify([(16, 3, 4, 8), (-3, 3, 5, -1), (INVALID, -1, 6, -1), (2**40, 3, 7, -1)], check=True)
    rows = w.take()
    assert bits(rows) == [OOB] * 4
    v = rows[0]
    assert (v.slot_idx, v.position, v.stored_token, v.expected_token, v.stored_chain_hash, v.expected_aux) == (
        16, 4, -1, 8, 0, 0)
    assert [r.slot_idx for r in rows[1:]] == [-3, INVALID, 2**40]


def test_verify_predecessor_outside_the_buffer() -> None:
    w = chain_world()
    w.verify([(7, 16, 1, -1), (7, INVALID, 1, -1), (7, 3, 1, -1)])
    rows = w.take()
    assert bits(rows) == [OOB, OOB]
    assert [r.expected_aux for r in rows] == [16, INVALID & (2**64 - 1)]
    assert rows[0].stored_token == 22 and rows[0].position == 1, "the slot itself is still read and checked"
    w.verify([(7, 16, 9, -1)])
    assert bits(w.take()) == [OOB | POS]


def test_other_negative_predecessors_mean_chain_head() -> None:
    w = chain_world()
    w.verify([(3, -1, 0, -1), (3, -7, 0, -1)])
    assert w.take() == []
    w.verify([(7, -2, 1, -1)])
    assert bits(w.take()) == [CHAIN]


def test_real_kv_strip_outside_its_source() -> None:
    w = World(source_rows=8)
    w.write([(-1, [2, 12], [1, 2], [0, 1])])  # slot 12 has no row in the 8-row source
    (v,) = w.take()
    assert v.fail_reason_bits == OOB and v.slot_idx == 12
    assert w.records[12, 0].item() == 2, "the record is still stored"
    w.verify([(12, 2, 1, -1)])
    assert bits(w.take()) == [OOB]


def test_write_slot_outside_the_buffer() -> None:
    w = World()
    w.write([(-1, [4, 99, 5], [1, 2, 3], [0, 1, 2])])
    (v,) = w.take()
    assert v.fail_reason_bits == OOB and v.slot_idx == 99 and v.position == 1
    assert int(w.ctx.slot_run_counter[0]) == 2
    # the chain advanced over the out-of-range token, as if it had been written
    w.verify([(5, 4, 2, -1)])
    assert bits(w.take()) == [CHAIN]


def test_write_seed_outside_the_buffer() -> None:
    w = World()
    w.write([(-1, [4], [1], [0]), (INVALID, [5], [2], [3]), (40, [6], [3], [7])])
    rows = w.take()
    assert bits(rows) == [OOB, OOB]
    assert [(r.slot_idx, r.expected_aux) for r in rows] == [(INVALID, 1), (40, 2)]
    w.verify([(5, -1, 3, -1), (6, -1, 7, -1)])
    assert w.take() == [], "an unreadable seed starts the chain at the anchor"


def test_write_offsets_past_the_token_arrays_are_clipped() -> None:
    w = World()
    plan = kc.WritePlan(write_offsets=torch.tensor([0, 50]), write_seed_slot_indices=torch.tensor([-1]),
                        write_num_valid_reqs=torch.tensor([1], dtype=torch.int32))
    t = torch.tensor([3, 4], dtype=torch.int64)
    kc.launch_canary_write_kernel(context=w.ctx, plan=plan, input_ids=t, positions=torch.tensor([0, 1]), out_cache_loc=t,
                                  enable_write_input_assert=False, expected_input_tokens=None,
                                  expected_input_positions=None)
    assert int(w.ctx.slot_run_counter[0]) == 2 and w.take() == []


def _plan(**over: Any) -> dict[str, Any]:
    kw = calls.plan(bs=2)
    kw["verify_plan_out"] = kc.VerifyPlan.allocate(verify_capacity=16, device="cpu")
    kw["verify_capacity"] = 16
    kw["req_pool_indices"] = torch.tensor([1, 2])
    kw["prefix_lens"] = torch.tensor([3, 2])
    kw["extend_seq_lens"] = torch.tensor([1, 1])
    r2t = torch.zeros(4, 8, dtype=torch.int32)
    r2t[1, :4] = torch.tensor([5, 6, 7, 8])
    r2t[2, :3] = torch.tensor([9, 10, 11])
    kw["req_to_token"] = r2t
    kw.update(over)
    return kw


def test_plan_reads_outside_req_to_token_give_invalid_slot() -> None:
    kw = _plan(req_pool_indices=torch.tensor([1, 7]), prefix_lens=torch.tensor([9, 2]))  # row 7 absent; 9 > 8 cols
    kc.launch_canary_plan_kernels(**kw)
    vp, wp = kw["verify_plan_out"], kw["write_plan_out"]
    n = int(vp.verify_num_valid[0])
    slots = vp.verify_slot_indices[:n].tolist()
    prev = vp.verify_prev_slot_indices[:n].tolist()
    assert n == 11
    assert slots == [5, 6, 7, 8, 0, 0, 0, 0, INVALID, INVALID, INVALID]
    assert prev[8] == 0 and prev[9] == -1 and prev[10] == INVALID
    assert wp.write_seed_slot_indices[:2].tolist() == [INVALID, INVALID]


def test_plan_lut_translation_out_of_range_gives_invalid_slot() -> None:
    lut = torch.arange(10, dtype=torch.int64) * 100  # slots 10 and 11 are beyond it
    kw = _plan(swa_window_size=8, full_to_swa_index_mapping=lut)
    kc.launch_canary_plan_kernels(**kw)
    vp = kw["verify_plan_out"]
    assert vp.verify_slot_indices[:5].tolist() == [500, 600, 700, 900, INVALID]
    assert vp.verify_prev_slot_indices[:5].tolist() == [-1, 500, 600, -1, 900]
    assert kw["write_plan_out"].write_seed_slot_indices[:2].tolist() == [700, INVALID]


def test_plan_expected_tokens_only_inside_the_pool() -> None:
    pool = torch.arange(32, dtype=torch.int32).view(4, 8) + 1000
    kw = _plan(req_to_verify_expected_tokens=pool, req_to_verify_expected_tokens_valid_lens=torch.tensor([2, 9]),
               kv_token_id_vs_position_offset=1)
    kc.launch_canary_plan_kernels(**kw)
    vp = kw["verify_plan_out"]
    # row 1: positions 0,1,2 -> pool columns 1,2,3 but valid only below 2; row 2: columns 1,2 (< 8 cols)
    assert vp.verify_expected_tokens[:5].tolist() == [1009, -1, -1, 1017, 1018]


def test_plan_overflow_disables_and_leaves_entries() -> None:
    kw = _plan()
    vp = kc.VerifyPlan.allocate(verify_capacity=4, device="cpu")
    vp.verify_slot_indices.fill_(-77)
    kw.update(verify_plan_out=vp, verify_capacity=4)
    kc.launch_canary_plan_kernels(**kw)
    assert int(vp.enable[0]) == 0 and int(vp.verify_num_valid[0]) == 4
    assert (vp.verify_slot_indices == -77).all()


def test_scatter_bad_rows_and_flat_indices() -> None:
    pool = torch.full((3, 4), -9, dtype=torch.int32)
    flat = torch.tensor([1, 2, 3, 4, 5, (1 << 33) + 6], dtype=torch.int64)
    kc.launch_scatter_req_token_ids_kernel(flat_in=flat, offsets=torch.tensor([0, 2, 4, 9]),
                                           req_pool_indices=torch.tensor([5, 1, 1]), pool_out=pool)
    # row 5 does not exist; row 1 is written by request 1 then wholly covered by request 2 (columns 0..3),
    # whose flat indices 4, 5 are valid and 6, 7 are past flat_in (left as they were)
    assert pool.tolist() == [[-9] * 4, [5, 6, -9, -9], [-9] * 4]
    assert (pool[1, 1] == 6).item(), "int32 keeps the low 32 bits"

"""The per-forward lifecycle on a hand-built pool: what each check catches, and what stays silent."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kvcanary.consts import CanaryLaunchTag, CanaryMode, FailReason, RealKvHashMode
from kvcanary.manager import CanaryBatch, CanaryCapacities, CanaryConfig, CanaryManager, ExpectedTokens
from tests.manager.world import NUM_SLOTS, Req, World, make_world, t64

CHAIN = int(FailReason.VERIFY_CHAIN_HASH_MISMATCH)
POS = int(FailReason.VERIFY_POSITION_MISMATCH)
RKV = int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)
TOK = int(FailReason.VERIFY_TOKEN_MISMATCH)
WPOS = int(FailReason.WRITE_POSITION_MISMATCH)


def two_sharing_requests(**world_kwargs: Any) -> tuple[World, Req, Req]:
    """A: 10 tokens at slots 1..10; B shares A's first 6 slots (a prefix hit) and adds 3 of its own."""
    w = make_world(**world_kwargs)
    a = Req(1, list(range(100, 112)), list(range(1, 11)))
    b = Req(2, [*range(100, 106), 300, 301, 302, 303], [*range(1, 7), 11, 12, 13])
    w.forward([(a, 0, 10)])
    w.step()
    w.forward([(b, 6, 3)])
    w.step()
    return w, a, b


def test_clean_shared_prefix_decode_and_padding_stay_silent() -> None:
    w, a, b = two_sharing_requests()
    for n in range(3):  # decode both, with graph padding rows (row 0, slot 0) at the end
        a.slots.append(20 + n)
        b.slots.append(30 + n)
        w.forward([(a, 10 + n, 1), (b, 9 + n, 1)], pad_rows=2)
        w.step()
    assert w.events() == []
    snap = w.manager.last_snapshot
    assert snap is not None and sum(snap.slot_run_counters) > 0
    for tag in (CanaryLaunchTag.HEAD_K_FULL, CanaryLaunchTag.TAIL_V_FULL):
        assert snap.kernel_run_counters[tag] == 2 * 5  # a verify and a write per forward


def test_req_to_token_pointing_at_another_live_slot_is_a_chain_violation_at_head() -> None:
    w, _a, b = two_sharing_requests()
    w.r2t[2, 7] = 4  # B's row now names one of A's slots (the classic page-table bug)
    b.slots[7] = 4
    w.forward([(b, 9, 0)])
    ev = w.events()
    head_k = [e for e in ev if e[0] == "HEAD_K_FULL"]
    assert head_k, ev
    assert any(bits & CHAIN for _, _, bits in head_k)
    assert any(slot == 4 and bits & POS for _, slot, bits in head_k)
    assert {"HEAD_V_FULL", "TAIL_K_FULL", "TAIL_V_FULL"} <= {e[0] for e in ev}


def test_k_byte_flip_in_a_used_slot_is_caught_at_tail_only_and_only_for_k() -> None:
    w, a, _b = two_sharing_requests()
    w.k[3, 0, 0] += 1.0  # slot 3 is in both A's and B's prefix
    w.forward([(a, 10, 0)])
    ev = w.events()
    assert ev and all(tag == "TAIL_K_FULL" and slot == 3 and bits == RKV for tag, slot, bits in ev)


def test_v_byte_flip_is_caught_by_the_v_half() -> None:
    w, a, _ = two_sharing_requests()
    w.v[5, 1, 3] -= 2.0
    w.forward([(a, 10, 0)])
    assert {(tag, slot, bits) for tag, slot, bits in w.events()} == {("TAIL_V_FULL", 5, RKV)}


def test_without_the_v_half_a_v_flip_goes_unseen() -> None:
    w, a, _ = two_sharing_requests(enable_v=False)
    assert all("_V_" not in t.name for t in w.manager.active_tags)
    w.v[5, 1, 3] -= 2.0
    w.forward([(a, 10, 0)])
    assert w.events() == []


def test_real_kv_mode_none_does_not_fingerprint() -> None:
    w, a, _ = two_sharing_requests(mode=RealKvHashMode.NONE)
    w.k[3, 0, 0] += 1.0
    w.forward([(a, 10, 0)])
    assert w.events() == []


def test_head_records_carry_no_real_kv_and_tail_records_do() -> None:
    w, _, _ = two_sharing_requests()
    g = w.manager.groups[0]
    head = g.k_head.view(torch.int64)[1:11]
    tail = g.k_tail.view(torch.int64)[1:11]
    assert torch.equal(head[:, :3], tail[:, :3])  # same token, position, chain
    assert bool((head[:, 3] == 0).all()) and bool((tail[:, 3] != 0).all())


def test_partial_mode_only_sees_the_first_16_bytes() -> None:
    w, a, _ = two_sharing_requests(mode=RealKvHashMode.PARTIAL)
    w.k[3, 1, 7] += 1.0  # byte 60 of the 64-byte row: outside PARTIAL's 16 bytes
    w.forward([(a, 10, 0)])
    assert w.events() == []
    w.k[3, 0, 1] += 1.0  # bytes 4..7: inside
    w.forward([(a, 10, 0)])
    assert {(t, s) for t, s, _ in w.events()} == {("TAIL_K_FULL", 3)}


def test_whole_row_swap_is_only_visible_to_the_token_check() -> None:
    """Two requests of equal length; row 2 is overwritten with row 1's slots: the chain and positions stay
    self-consistent, only VERIFY_TOKEN (the request's own ids) can tell."""
    w = make_world()
    a = Req(1, list(range(100, 108)), list(range(1, 8)))
    b = Req(2, list(range(200, 208)), list(range(11, 18)))
    w.forward([(a, 0, 7), (b, 0, 7)])
    w.step()
    b.slots = list(a.slots)
    w.forward([(b, 7, 0)])
    ev = w.events()
    assert ev and all(tag.startswith(("HEAD", "TAIL")) and bits == TOK for tag, _, bits in ev)


def test_chain_position_assert_is_armed_by_mark_init_finished() -> None:
    w = make_world()
    mgr = w.manager
    mgr.state.enable_chain_position_assert.zero_()  # as before warmup/capture
    a = Req(1, list(range(100, 110)), list(range(1, 6)))
    w.forward([(a, 0, 5)])
    a.slots.append(6)
    w.forward([(a, 5, 1)], positions_override={1: [9]})  # synthetic position, as in a dummy batch
    assert w.events() == []
    mgr.mark_init_finished()
    a.slots.append(7)
    w.forward([(a, 6, 1)], positions_override={1: [12]})
    ev = w.events()
    assert ("HEAD_K_FULL", 7, WPOS) in ev and ("TAIL_K_FULL", 7, WPOS) in ev


def test_verify_overflow_skips_instead_of_corrupting_and_is_counted(caplog: pytest.LogCaptureFixture) -> None:
    caps = CanaryCapacities(verify_capacity=4, write_req_capacity=8, write_token_capacity=32, sweep_capacity=8,
                            expected_token_capacity=64)
    w = make_world(capacities=caps)
    a = Req(1, list(range(100, 112)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    w.forward([(a, 10, 0)])  # 10 prefix entries > capacity 4
    w.step()
    w.step()
    assert w.manager.last_snapshot is not None and w.manager.last_snapshot.skipped_verifies >= 1
    assert w.events() == []
    assert "verify skipped" in caplog.text


def test_ring_overflow_is_counted_and_reported() -> None:
    w = make_world(config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL, ring_capacity=3))
    a = Req(1, list(range(100, 112)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    w.k[1:11] += 1.0
    w.forward([(a, 10, 0)])
    w.manager.flush()
    assert w.manager.total_violations == 10 and len(w.manager.events) == 3
    assert "total_violations=10 ring_overflow=True" in w.manager.events[0].message


# -- bad input -------------------------------------------------------------------------------------------------
def _batch(bs: int = 1, n: int = 1, dtype: torch.dtype = torch.int64) -> CanaryBatch:
    def z(k: int) -> torch.Tensor:
        return torch.zeros(k, dtype=dtype)

    return CanaryBatch(req_pool_indices=z(bs), prefix_lens=z(bs), extend_lens=z(bs), input_ids=z(n),
                       positions=z(n), out_cache_loc=z(n), expected_tokens=ExpectedTokens.from_lists([[]] * bs))


def test_capacity_errors_name_the_capacity() -> None:
    w = make_world()
    with pytest.raises(RuntimeError, match=r"batch_size=9 exceeds pre-allocated write_req_capacity=8"):
        w.manager.prepare(_batch(bs=9))
    with pytest.raises(RuntimeError, match=r"token count=200 exceeds pre-allocated write_entry_capacity"):
        w.manager.prepare(_batch(n=200))


def test_batch_errors_name_the_argument() -> None:
    w = make_world()
    with pytest.raises(TypeError, match=r"input_ids must have dtype torch.int32 or torch.int64, got torch.float32"):
        w.manager.prepare(CanaryBatch(req_pool_indices=t64([1]), prefix_lens=t64([0]), extend_lens=t64([1]),
                                      input_ids=torch.zeros(1), positions=t64([0]), out_cache_loc=t64([1])))
    with pytest.raises(ValueError, match=r"positions length must equal input_ids length 2, got 1"):
        w.manager.prepare(CanaryBatch(req_pool_indices=t64([1]), prefix_lens=t64([0]), extend_lens=t64([2]),
                                      input_ids=t64([5, 6]), positions=t64([0]), out_cache_loc=t64([1, 2])))
    with pytest.raises(ValueError, match=r"expected_tokens is required when enable_verify_token=True"):
        w.manager.prepare(CanaryBatch(req_pool_indices=t64([1]), prefix_lens=t64([0]), extend_lens=t64([1]),
                                      input_ids=t64([5]), positions=t64([0]), out_cache_loc=t64([1])))
    with pytest.raises(RuntimeError, match=r"cumsum\(req_all_ids_lens\)=3 != req_all_ids_flat.numel\(\)=2"):
        ExpectedTokens(flat=t64([1, 2]), lens=t64([3]))  # refused when built, before any forward
    with pytest.raises(RuntimeError, match=r"req_all_ids_lens length 2 != batch_size 1; ForwardBatch snapshot diverged"):
        CanaryBatch(req_pool_indices=t64([1]), prefix_lens=t64([0]), extend_lens=t64([1]), input_ids=t64([5]),
                    positions=t64([0]), out_cache_loc=t64([1]), expected_tokens=ExpectedTokens.from_lists([[1], [2]]))
    with pytest.raises(ValueError, match=r"forward_index must be in \[0, 1\)"):
        w.manager.prepare(_batch(), forward_index=1)


def test_int32_batches_are_accepted() -> None:
    w = make_world()
    b = _batch(dtype=torch.int32)
    with w.manager.forward(b):
        pass
    assert w.events() == []


def test_lifecycle_order_is_enforced() -> None:
    w = make_world()
    with pytest.raises(RuntimeError, match=r"head\(\) called without prepare\(\)"):
        w.manager.head(_batch())
    with pytest.raises(RuntimeError, match=r"tail\(\) called without a preceding head\(\)"):
        w.manager.tail()


def test_attach_rejects_mode_none_and_wrong_types() -> None:
    w = make_world()
    caps = w.manager.capacities
    with pytest.raises(ValueError, match=r"config.mode is NONE"):
        CanaryManager.attach(pool=w.manager.pool, capacities=caps, config=CanaryConfig(mode=CanaryMode.NONE))
    with pytest.raises(TypeError, match=r"capacities must be a CanaryCapacities"):
        CanaryManager.attach(pool=w.manager.pool, capacities=None, config=CanaryConfig())  # type: ignore[arg-type]


def test_buffers_are_allocated_once_at_attach() -> None:
    w, a, _b = two_sharing_requests()
    before = {name: t.data_ptr() for name, t in w.manager.transfer_buffers()}
    ring = w.manager.state.log.violation_ring.data_ptr()
    for n in range(2):
        a.slots.append(40 + n)
        w.forward([(a, 10 + n, 1)])
        w.step()
    assert {name: t.data_ptr() for name, t in w.manager.transfer_buffers()} == before
    assert w.manager.state.log.violation_ring.data_ptr() == ring
    assert len(before) == 4 and all(t.shape == (NUM_SLOTS, 32) for _, t in w.manager.transfer_buffers())

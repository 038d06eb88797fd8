"""The SWA group (window + full→SWA LUT) and the draft pool's +1 token offset."""

from __future__ import annotations

import torch

from kvcanary.consts import CanaryLaunchTag as T
from kvcanary.consts import FailReason
from kvcanary.hashing import ANCHOR_HASH, to_int64
from tests.manager.world import Req, make_world

CHAIN = int(FailReason.VERIFY_CHAIN_HASH_MISMATCH)
RKV = int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)
TOK = int(FailReason.VERIFY_TOKEN_MISMATCH)
OOB = int(FailReason.INDEX_OUT_OF_RANGE)


def test_swa_writes_go_through_the_lut_and_only_the_window_is_verified() -> None:
    w = make_world(swa_window=4)
    a = Req(1, list(range(100, 140)), list(range(1, 13)))
    w.forward([(a, 0, 12)])
    swa = w.manager.groups[1]
    rec = swa.k_tail.view(torch.int64)
    lut = w.lut
    assert lut is not None
    for pos, full in enumerate(a.slots):
        assert int(rec[int(lut[full]), 1]) == pos  # the SWA record sits at the translated slot
    # evict the SWA slots outside the window (positions < 12 - 4): the LUT forgets them
    for full in a.slots[:8]:
        lut[full] = 0
    a.slots.append(13)
    w.manager.flush()
    before = w.manager.last_snapshot
    w.forward([(a, 12, 1)])
    w.step()
    assert w.events() == []
    # ... and only [prefix - window, prefix) was verified on the SWA group (plus the one token written)
    after = w.manager.last_snapshot
    assert before is not None and after is not None
    done = [x - y for x, y in zip(after.slot_run_counters, before.slot_run_counters, strict=True)]
    assert done[T.HEAD_K_SWA] == 4 + 1 and done[T.HEAD_K_FULL] == 12 + 1


def test_swa_kv_flip_is_caught_on_the_swa_group_only() -> None:
    w = make_world(swa_window=4)
    a = Req(1, list(range(100, 140)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    assert w.swa_k is not None and w.lut is not None
    w.swa_k[int(w.lut[a.slots[8]])] += 1.0
    w.forward([(a, 10, 0)])
    assert {(t, b) for t, _, b in w.events()} == {("TAIL_K_SWA", RKV)}


def test_a_stale_translation_breaks_the_swa_chain() -> None:
    w = make_world(swa_window=4)
    a = Req(1, list(range(100, 140)), list(range(1, 11)))
    b = Req(2, list(range(200, 240)), list(range(20, 30)))
    w.forward([(a, 0, 10), (b, 0, 10)])
    assert w.lut is not None
    w.lut[a.slots[7]] = w.lut[b.slots[7]]  # a's position 7 now translates to b's SWA slot
    w.forward([(a, 10, 0)])
    ev = w.events()
    assert ev and all(t.endswith("_SWA") for t, _, _ in ev)
    assert any(b_ & CHAIN for _, _, b_ in ev)


def test_a_write_location_outside_the_lut_is_reported_not_clamped() -> None:
    w = make_world(swa_window=4)
    assert w.lut is not None
    a = Req(1, list(range(100, 140)), [1, 2, 3, w.lut.shape[0] + 5])
    w.forward([(a, 0, 4)])
    ev = w.events()
    assert any(t == "HEAD_K_SWA" and b_ & OOB for t, _, b_ in ev)


def test_draft_offset_matches_rotated_tokens() -> None:
    """A draft pool's slot p holds token p + 1: with offset 1 the token check is silent ..."""
    w = make_world(offset=1)
    a = Req(1, list(range(100, 120)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    w.forward([(a, 10, 0)])
    assert w.events() == []


def test_without_the_offset_rotated_tokens_fail_the_token_check() -> None:
    """... and the same rotated records on a target pool (offset 0) are token mismatches."""
    w = make_world(offset=0)
    a = Req(1, list(range(100, 120)), list(range(1, 11)))
    w.forward([(a, 0, 10)], tokens_override={1: a.tokens[1:]})
    w.forward([(a, 10, 0)])
    ev = w.events()
    assert ev and all(b_ == TOK for _, _, b_ in ev)


def test_a_seed_without_an_swa_slot_restarts_the_swa_chain_at_the_anchor() -> None:
    """The LUT's 0 at the seed (the position before the chunk has no SWA slot: a ring engine's chunk of a
    whole window overwrites it) starts the SWA chain at the anchor: no false write_position from the padding
    slot's record. The FULL group's chain goes on from its real seed."""
    w = make_world(swa_window=4)
    a = Req(1, list(range(100, 140)), list(range(1, 11)))
    w.forward([(a, 0, 6)])
    w.step()
    assert w.lut is not None
    w.lut[a.slots[5]] = 0  # the seed's position: no SWA slot any more
    w.forward([(a, 6, 2)])
    w.step()
    assert w.events() == []
    anchor = to_int64(ANCHOR_HASH)
    swa = w.manager.groups[1].k_tail.view(torch.int64)
    full = w.manager.groups[0].k_tail.view(torch.int64)
    assert int(swa[int(w.lut[a.slots[6]]), 2]) == anchor  # the restarted chain's head
    assert int(swa[int(w.lut[a.slots[7]]), 1]) == 7
    assert int(full[a.slots[6], 2]) != anchor  # chained from position 5's record
    w.forward([(a, 8, 1)])  # the next step verifies the chunk's tokens: their chain holds
    w.step()
    assert w.events() == []

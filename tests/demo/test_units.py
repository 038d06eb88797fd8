"""Engine building blocks: allocator, radix cache, the model's paged attention, validation."""

from __future__ import annotations

import random
from collections.abc import Hashable

import pytest
import torch

from kvcanary.demo.engine import (
    Engine,
    EngineConfig,
    Fault,
    ModelConfig,
    OutOfSlots,
    RadixCache,
    SlotAllocator,
    TinyTransformer,
)
from kvcanary.demo.engine.faults import FaultInjector
from kvcanary.demo.engine.kv_access import PoolKv, slot_runs
from kvcanary.demo.engine.kv_pool import KvPool, ReqToTokenPool
from kvcanary.demo.engine.model import ModelInput, RowMeta


def test_allocator_is_lifo_reserves_zero_and_does_not_check_duplicates() -> None:
    a = SlotAllocator(6, name="t")
    assert a.alloc(3) == [1, 2, 3]
    a.free([2, 0])
    assert a.alloc(1) == [2]  # the last freed comes back first; index 0 is never handed out
    a.free([3, 3])  # a double free goes unnoticed (that is the double-allocation bug class)
    assert a.alloc(2) == [3, 3]
    with pytest.raises(OutOfSlots, match=r"t: 9 requested"):
        a.alloc(9)
    rows = SlotAllocator(4, name="rows", ascending=False)
    assert rows.alloc(3) == [3, 2, 1]


def test_radix_match_insert_split_and_dedup() -> None:
    freed: list[int] = []
    tree = RadixCache(on_free=freed.extend)
    assert tree.insert([1, 2, 3, 4], [11, 12, 13, 14]) == 0
    slots, node = tree.match_prefix([1, 2, 9])
    assert slots == [11, 12] and node.value == [11, 12]  # the node was split at the divergence
    assert tree.insert([1, 2, 7], [21, 22, 23]) == 2  # two positions were already cached
    e = tree.sweep_entries()
    got = sorted(zip(e.slots.tolist(), e.positions.tolist(), e.prev_slots.tolist(), strict=True))
    assert got == [(11, 0, -1), (12, 1, 11), (13, 2, 12), (14, 3, 13), (23, 2, 12)]



def _walked(tree: RadixCache, *, unlocked_only: bool = False) -> list[tuple[int, int, int]]:
    """The sweep's entries as a full walk of the tree builds them, in depth-first order."""
    out = []
    for node, depth in tree.nodes():
        if unlocked_only and node.lock_ref > 0:
            continue
        prev = node.parent.value[-1] if node.parent is not None and node.parent.value else -1
        for j, s in enumerate(node.value):
            out.append((s, depth + j, prev))
            prev = s
    return out


def test_radix_sweep_entries_kept_from_its_events_match_a_full_walk() -> None:
    rng = random.Random(36)
    tree = RadixCache(on_free=lambda _s: None)
    next_slot = iter(range(1, 10**6))
    locked = []
    rejoined = 0
    for step in range(400):
        op = rng.random()
        keys: list[Hashable] = [rng.randrange(4) for _ in range(rng.randrange(1, 9))]
        if op < 0.5:
            tree.insert(keys, [next(next_slot) for _ in keys])
        elif op < 0.7:
            _, node = tree.match_prefix(keys)  # may split a node: the entries stay as they were
            if node is not tree.root and rng.random() < 0.3:
                tree.inc_lock(node)
                locked.append(node)
        elif op < 0.85:
            tree.evict(rng.randrange(1, 6))
        elif op < 0.9 and locked:
            tree.dec_lock(locked.pop(rng.randrange(len(locked))))
        else:
            held = [s for n, _ in tree.nodes() for s in n.value]
            if held:
                tree.drop_containing({rng.choice(held)})
        before = tree._swept[1] if tree._swept is not None else None
        e = tree.sweep_entries()
        e.validate()
        rejoined += e is not before
        assert list(zip(e.slots.tolist(), e.positions.tolist(), e.prev_slots.tolist(), strict=True)) == _walked(tree)
        u = tree.sweep_entries(unlocked_only=True)
        assert list(zip(u.slots.tolist(), u.positions.tolist(), u.prev_slots.tolist(), strict=True)) == \
            _walked(tree, unlocked_only=True), step
    assert 0 < rejoined < 400 and tree.total_size() > 0

def test_radix_eviction_is_lru_and_respects_locks() -> None:
    freed: list[int] = []
    scrubbed: list[int] = []
    tree = RadixCache(on_free=freed.extend, scrub=scrubbed.extend)
    tree.insert([1, 2], [11, 12])
    tree.insert([5, 6], [15, 16])
    tree.insert([8], [18])
    _, _node = tree.match_prefix([1, 2])  # touch: most recently used
    tree.inc_lock(tree.match_prefix([5, 6])[1])
    assert tree.evictable_size() == 3
    assert tree.evict(1) == 1 and freed == [18] and scrubbed == [18]
    assert tree.evict(5) == 2 and freed == [18, 11, 12]  # the locked node stays
    assert tree.total_size() == 2


def test_eviction_scrub_fault_hits_the_next_lru_leaf() -> None:
    scrubbed: list[int] = []
    faults = FaultInjector(Fault.KV_FLIP_CACHED)
    tree = RadixCache(on_free=lambda _s: None, scrub=scrubbed.extend, faults=faults)
    tree.insert([1], [11])
    tree.insert([2], [12])
    tree.evict(1)
    assert scrubbed == [12] and len(faults.firings) == 1  # 11 was evicted, 12 (still cached) was zeroed


def test_slot_runs() -> None:
    assert slot_runs([4, 5, 6, 9, 10, 3]) == [(4, 3), (9, 2), (3, 1)]


def test_attention_reads_the_pool_through_req_to_token() -> None:
    mc = ModelConfig()
    model = TinyTransformer(mc, device=torch.device("cpu"), window=lambda _l: 0)
    pool = KvPool(num_slots=32, layers=mc.n_layers, n_kv_heads=mc.n_kv_heads, head_dim=mc.head_dim,
                  device=torch.device("cpu"))
    r2t = ReqToTokenPool(rows=3, max_context_len=16, device=torch.device("cpu"))
    kv = PoolKv(pool=pool, swa=None, r2t=r2t, layer_map=[(False, i) for i in range(mc.n_layers)], window=0,
                faults=FaultInjector())

    def run(ids: list[int], slots: list[int], prefix: int) -> torch.Tensor:
        r2t.write(1, prefix, slots)
        n = len(ids)
        inp = ModelInput(torch.tensor(ids), torch.arange(prefix, prefix + n), torch.tensor(slots),
                         (RowMeta(1, prefix, n, 0),))
        return model.forward(inp, kv)

    run([3, 4, 5, 6], [7, 8, 9, 10], 0)
    base = run([7], [11], 4)[-1]
    pool.k[0][8] += 1.0  # a cached key of the prefix: the decode output must change
    changed = run([7], [11], 4)[-1]
    assert not torch.allclose(base, changed)
    r2t.write(1, 0, [7, 8, 9, 10])
    pool.k[0][8] -= 1.0
    assert torch.allclose(run([7], [11], 4)[-1], base, atol=1e-5)


def test_engine_input_validation() -> None:
    cfg = EngineConfig(num_slots=64, req_rows=4, max_context_len=32)
    eng = Engine(cfg)
    with pytest.raises(ValueError, match=r"needs 40 positions, more than max_context_len=32"):
        eng.submit([1] * 30, 10)
    with pytest.raises(ValueError, match=r"token ids outside \[0, 256\)"):
        eng.submit([999], 2)
    with pytest.raises(ValueError, match=r"remote_prefill needs attach_prefill_peer"):
        eng.submit([1, 2], 2, remote_prefill=True)
    with pytest.raises(ValueError, match=r"abort: unknown request id 7"):
        eng.abort(7)
    with pytest.raises(ValueError, match=r"speculative decoding .* needs full attention"):
        EngineConfig(swa_window=4, num_draft_tokens=2)
    with pytest.raises(ValueError, match=r"n_heads \(3\) must be a multiple of n_kv_heads \(2\)"):
        ModelConfig(n_heads=3)


def test_engine_serves_requests_to_completion_without_a_canary() -> None:
    eng = Engine(EngineConfig(num_slots=128, req_rows=5, max_running=4, chunk_size=8))
    reqs = [eng.submit([5, 6, 7, 8, 9, 10, 11, 12, 13, 14], 5) for _ in range(3)]
    for _ in range(30):
        eng.step()
    assert all(r.num_outputs == 5 and r.state.value == "finished" for r in reqs)
    assert reqs[1].match_len > 0  # the later ones reused the first one's prefix
    assert reqs[0].tokens[10:] == reqs[1].tokens[10:]  # same prompt, same greedy output

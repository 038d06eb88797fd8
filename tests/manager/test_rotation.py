"""Layer rotation: every layer's K and V bytes are fingerprinted, ``layer_rotation`` buffers per forward; a flip
in any layer of a live slot is reported within ``G = ceil(buffers / per_step)`` forwards (the stated bound)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
import torch

from kvcanary.consts import CanaryLaunchTag, FailReason, PoolKind, RealKvHashMode
from kvcanary.extensions import Extensions
from kvcanary.manager import (
    CanaryCapacities,
    CanaryConfig,
    CanaryManager,
    KvPoolSpec,
    PoolGroupSpec,
    VerifyBudget,
)
from kvcanary.manager.rotation import rotation_sets
from kvcanary.plans import VerifyPlan, WritePlan
from tests.manager.world import MAX_LEN, NUM_SLOTS, ROWS, Req, World

RKV = int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)


@dataclass
class LayeredWorld(World):
    layers: tuple[torch.Tensor, ...] = ()

    def write_kv(self, loc: list[int]) -> None:
        """The "model": every layer's K and V bytes of each written slot."""
        for s in loc:
            if 0 < s < NUM_SLOTS:
                g = torch.Generator().manual_seed(1000 + s)
                for buf in self.layers:
                    buf[s] = torch.randn(buf.shape[1:], generator=g)


def layered_world(num_layers: int, per_step: int, mode: RealKvHashMode = RealKvHashMode.ALL,
                  extensions: Extensions | None = None, budget: VerifyBudget | None = None) -> LayeredWorld:
    layers = tuple(torch.zeros(NUM_SLOTS, 2, 8) for _ in range(2 * num_layers))  # K0, V0, K1, V1, ...
    r2t = torch.zeros(ROWS, MAX_LEN, dtype=torch.int32)
    group = PoolGroupSpec(kind=PoolKind.FULL, k_layer0=layers[0], v_layer0=layers[1], layers=layers)
    cfg = CanaryConfig(real_kv_mode=mode, enable_v=True, layer_rotation=per_step, health_warmup_steps=3,
                       health_every=1, extensions=extensions, verify_budget=budget)
    caps = CanaryCapacities.from_engine(pool_slot_count=NUM_SLOTS, max_batch_size=8, req_rows=ROWS,
                                        max_tokens_per_forward=MAX_LEN, max_context_len=MAX_LEN)
    mgr = CanaryManager.attach(pool=KvPoolSpec(groups=(group,), req_to_token=r2t), capacities=caps, config=cfg)
    mgr.mark_init_finished()
    return LayeredWorld(mgr, layers[0], layers[1], r2t, layers=layers)


def _decode_until(w: LayeredWorld, req: Req, forwards: int, free: list[int]) -> list[int]:
    """``forwards`` decode forwards of ``req``; after each, how many real-KV rows were reported so far."""
    seen = []
    for _ in range(forwards):
        req.slots.append(free.pop())
        w.forward([(req, len(req.slots) - 1, 1)])
        w.step()
        seen.append(len([e for e in w.events() if e[2] & RKV]))
    return seen


@pytest.mark.parametrize(("num_layers", "per_step"), [(3, 1), (3, 4), (5, 2)])
def test_a_flip_in_any_layer_is_reported_within_the_bound(num_layers: int, per_step: int) -> None:
    rnd = random.Random()
    bound = rotation_sets(2 * num_layers, per_step)
    for buf_index in range(2 * num_layers):
        w = layered_world(num_layers, per_step)
        free = list(range(NUM_SLOTS - 1, 0, -1))
        rnd.shuffle(free)
        req = Req(row=1, tokens=[rnd.randrange(100) for _ in range(MAX_LEN)])
        req.slots = [free.pop() for _ in range(6)]
        w.forward([(req, 0, 6)])
        w.step()
        assert w.events() == []
        # skip a random number of forwards so the flip lands at any phase of the rotation
        _decode_until(w, req, rnd.randrange(bound), free)
        victim = req.slots[rnd.randrange(len(req.slots) - 1)]
        w.layers[buf_index][victim].view(torch.uint8).reshape(-1)[rnd.randrange(16)] ^= 0x10
        counts = _decode_until(w, req, bound, free)
        assert counts[-1] > 0, (buf_index, counts)
        events = [e for e in w.events() if e[2] & RKV]
        assert {slot for _, slot, _ in events} == {victim}, events
        # layer 0's buffers are also the TAIL endpoints' sources (TAIL_V_FULL for V0); the others only rotate
        tags = {CanaryLaunchTag.TAIL_K_FULL.name} | ({CanaryLaunchTag.TAIL_V_FULL.name} if buf_index < 2 else set())
        assert {tag for tag, _, _ in events} <= tags, events


def test_clean_run_with_rotation_is_silent_and_folds_at_most_per_step_sources() -> None:
    w = layered_world(4, 3)
    rot = w.manager.rotations[0]
    assert rot is not None and rot.num_sets == 3
    assert all(len(s.context.real_kv_sources) <= 3 for s in rot.sets)
    assert sum(len(s.context.real_kv_sources) for s in rot.sets) == 8
    free = list(range(NUM_SLOTS - 1, 0, -1))
    req = Req(row=2, tokens=list(range(MAX_LEN)))
    req.slots = [free.pop() for _ in range(5)]
    w.forward([(req, 0, 5)])
    w.step()
    _decode_until(w, req, 7, free)
    assert w.events() == []
    assert int(rot.counter[0]) == 8
    verified = [int(s.context.slot_run_counter[0]) for s in rot.sets]
    # one set verifies per forward (prefixes 5..11), every set writes the 12 new tokens
    assert sum(verified) == sum(range(5, 12)) + 3 * 12 and all(v > 12 for v in verified)
    names = [n for n, _ in w.manager.transfer_buffers()]
    assert [n for n in names if "rotation" in n] == ["full.rotation0", "full.rotation1", "full.rotation2"]


def test_rotation_needs_layers_and_a_fingerprint_mode() -> None:
    with pytest.raises(ValueError, match="real_kv_mode"):
        CanaryConfig(layer_rotation=1)
    with pytest.raises(ValueError, match="at most 4"):
        CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, layer_rotation=5)


def test_rotation_reads_a_zero_marked_plan_as_the_endpoints_do() -> None:
    """With the zero-slot extension on, a zero inside a live prefix is one ZERO_SLOT finding per endpoint; the
    rotation's verify reads the same plan with the same extension, so it adds no out-of-range rows."""
    w = layered_world(2, 1, extensions=Extensions(zero_slot_in_live_range=True))
    req = Req(row=1, tokens=list(range(100, 140)), slots=list(range(10, 16)))
    w.forward([(req, 0, 6)])
    w.step()
    assert w.events() == []
    req.slots[2] = 0
    for i in range(4):
        req.slots.append(20 + i)
        w.forward([(req, len(req.slots) - 1, 1)])
        w.step()
    bits = {b for _, _, b in w.events()}
    assert bits == {int(FailReason.ZERO_SLOT_IN_LIVE_RANGE)}, w.events()


@pytest.mark.parametrize("victim", [2, 3, 4])
def test_a_budget_and_layer_rotation_together_still_reach_every_layer(victim: int) -> None:
    """With a budget whose window moves every forward and two rotation sets, a window could meet only one
    set forever; the window now stays a whole round, so a flip in layer 1 of any older slot is caught
    within G x the budget's period."""
    w = layered_world(2, 2, budget=VerifyBudget(max_entries=4, newest_per_request=2))
    req = Req(row=1, tokens=list(range(100, 140)), slots=list(range(1, 8)))
    w.forward([(req, 0, 7)])
    w.step()
    w.layers[2][req.slots[victim]].view(torch.uint8).reshape(-1)[0] ^= 0x10  # K of layer 1 only
    budget = w.manager.config.verify_budget
    assert budget is not None
    rounds = rotation_sets(4, 2) * budget.period(batch_size=1, max_verify_len=7 + 12)
    for n in range(min(rounds, 12)):
        req.slots.append(20 + n)
        w.forward([(req, 7 + n, 1)])
        w.step()
    hits = [e for e in w.events() if e[2] & RKV]
    assert hits and {slot for _, slot, _ in hits} == {req.slots[victim]}, hits


def test_a_forward_whose_plan_overflowed_keeps_the_rotation_turn() -> None:
    """The set whose turn it is verifies in the next forward that verifies: a forward whose plan overflowed
    (``enable`` 0, no set verifies) leaves the counter, one that verifies moves it by one."""
    w = layered_world(2, 2)
    rot = w.manager.rotations[0]
    assert rot is not None
    plan = VerifyPlan.allocate(verify_capacity=4, device="cpu")
    plan.verify_num_valid.zero_()
    write = WritePlan.allocate(write_req_capacity=1, device="cpu")
    none = torch.zeros(0, dtype=torch.int64)
    for enable, want in ((0, 0), (1, 1), (0, 1), (1, 2)):
        plan.enable.fill_(enable)
        rot.tail(plan, write, input_ids=none, positions=none, out_cache_loc=none, backend="torch_ref")
        assert int(rot.counter[0]) == want, (enable, want)

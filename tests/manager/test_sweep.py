"""The sweep: cached slots no running request reads, on the TAIL buffers with real-KV sources."""

from __future__ import annotations

import pytest
import torch

from kvcanary.consts import CanaryMode, FailReason, RealKvHashMode
from kvcanary.manager import CanaryCapacities, CanaryConfig, SweepEntries
from kvcanary.manager.graphs import ForwardGraphs
from tests.manager.world import Req, World, chain_entries, make_world

RKV = int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)
CHAIN = int(FailReason.VERIFY_CHAIN_HASH_MISMATCH)
POS = int(FailReason.VERIFY_POSITION_MISMATCH)


def test_sweep_catches_a_flip_in_an_orphan_slot_that_no_forward_reads() -> None:
    w = make_world(sweep=1)
    done = Req(1, list(range(100, 120)), list(range(1, 9)))  # finished: only the cache holds its slots
    live = Req(2, list(range(200, 220)), list(range(20, 26)))
    w.forward([(done, 0, 8), (live, 0, 6)])
    w.manager.set_sweep_source(lambda: chain_entries([done]))
    w.step()
    w.step()
    assert w.events() == []
    w.k[4, 1, 0] = 7.0
    live.slots.append(26)
    w.forward([(live, 6, 1)])  # the per-forward path does not read slot 4 ...
    w.manager.flush()
    assert w.manager.events == []
    w.step()  # ... the sweep does
    ev = w.events()
    assert {(t, s, b) for t, s, b in ev} == {("SWEEP_K_FULL", 4, RKV)}


def test_sweep_sees_a_reused_cached_slot() -> None:
    w = make_world(sweep=1)
    cached = Req(1, list(range(100, 120)), list(range(1, 9)))
    w.forward([(cached, 0, 8)])
    w.manager.set_sweep_source(lambda: chain_entries([cached]))
    other = Req(2, list(range(200, 220)), [30, 31, 5])  # slot 5 handed out while the cache still holds it
    w.forward([(other, 0, 3)])
    w.step()
    ev = w.events()
    assert any(t == "SWEEP_K_FULL" and s == 5 and b & POS and b & CHAIN for t, s, b in ev)


def test_sweep_schedule_first_evaluation_then_every_interval() -> None:
    w = make_world(sweep=3)
    a = Req(1, list(range(100, 120)), list(range(1, 5)))
    w.forward([(a, 0, 4)])
    w.manager.set_sweep_source(lambda: chain_entries([a]))
    passes = []
    for _ in range(7):
        w.step()
        passes.append(w.manager.sweep_passes)
    assert passes == [1, 1, 1, 2, 2, 2, 3]


def test_more_entries_than_capacity_are_swept_in_chunks() -> None:
    caps = CanaryCapacities(verify_capacity=64, write_req_capacity=8, write_token_capacity=32, sweep_capacity=3,
                            expected_token_capacity=64)
    w = make_world(sweep=1, capacities=caps)
    a = Req(1, list(range(100, 120)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    w.k[9] += 1.0
    assert w.manager.run_sweep(chain_entries([a])) == 10
    assert {(t, s) for t, s, _ in w.events()} == {("SWEEP_K_FULL", 9)}


def test_swa_sweep_translates_and_skips_evicted_slots() -> None:
    w = make_world(sweep=1, swa_window=4)
    a = Req(1, list(range(100, 120)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    assert w.lut is not None and w.swa_k is not None
    for full in a.slots[:5]:
        w.lut[full] = 0  # evicted from the SWA pool: the sweep must skip them, silently
    w.manager.run_sweep(chain_entries([a]))
    assert w.events() == []
    w.swa_k[int(w.lut[a.slots[7]])] += 1.0
    w.manager.run_sweep(chain_entries([a]))
    assert {(t, b) for t, _, b in w.events()} == {("SWEEP_K_SWA", RKV)}



def test_the_same_entries_again_are_swept_from_the_device_without_a_copy() -> None:
    """A source returning the previous sweep's object says "unchanged": no host-to-device copy, the same
    findings (the SWA translation redone through the table as it is now)."""
    w = make_world(sweep=1, swa_window=4)
    a = Req(1, list(range(100, 120)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    assert w.lut is not None and w.swa_k is not None
    entries = chain_entries([a])
    runner = w.manager._sweep
    copies: list[int] = []
    original = runner._h2d.copy

    def counted(dst: torch.Tensor, parts: list[torch.Tensor]) -> int:
        copies.append(len(parts))
        return original(dst, parts)

    runner._h2d.copy = counted  # type: ignore[method-assign]
    assert w.manager.run_sweep(entries) == 10 and w.events() == []
    assert w.manager.run_sweep(entries) == 10 and w.events() == [] and len(copies) == 1
    w.k[3] += 1.0
    w.swa_k[int(w.lut[a.slots[2]])] += 1.0
    w.lut[a.slots[2]] = 0  # ... then evicted from the SWA pool: no longer swept there
    swa8 = int(w.lut[a.slots[8]])
    w.swa_k[swa8] += 1.0
    assert w.manager.run_sweep(entries) == 10 and len(copies) == 1
    assert {(t, s) for t, s, _ in w.events()} == {("SWEEP_K_FULL", 3), ("SWEEP_K_SWA", swa8)}
    assert w.manager.run_sweep(chain_entries([a])) == 10 and len(copies) == 2  # a new object: copied

def test_sweep_errors() -> None:
    w = make_world(sweep=0)
    with pytest.raises(RuntimeError, match=r"needs config.sweep_interval > 0"):
        w.manager.run_sweep(SweepEntries.from_lists([], [], []))
    w = make_world(config=CanaryConfig(sweep_interval=2, real_kv_mode=RealKvHashMode.ALL))
    with pytest.raises(RuntimeError, match=r"no sweep source attached"):
        w.manager.run_sweep()
    bad = SweepEntries.from_lists([1, 2], [0, 1], [-1, 1])
    with pytest.raises(ValueError, match=r"SweepEntries.positions must be 1-D int64 of length 2"):
        w.manager.run_sweep(SweepEntries(bad.slots, bad.positions[:1], bad.prev_slots))


def _sweeps(graphs: ForwardGraphs | None) -> tuple[World, list[tuple[str, int, int]]]:
    w = make_world(sweep=1, swa_window=4)
    w.manager._sweep.graphs = graphs
    a = Req(1, list(range(100, 120)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    assert w.lut is not None and w.swa_k is not None
    kept = chain_entries([a])
    found = []
    for i, entries in enumerate([kept, kept, chain_entries([a]), kept, chain_entries([a])]):
        if i == 2:
            w.k[3] += 1.0
        if i == 3:
            w.swa_k[int(w.lut[a.slots[6]])] += 1.0
        w.manager.run_sweep(entries)
        found.append(sorted(w.events()))
    return w, [e for f in found for e in f]


def test_the_sweep_runs_its_launches_through_the_graphs_when_they_are_on() -> None:
    """What the GPU's graphs replay (here run eagerly, ``capture=False``): the same findings as the plain
    launches, every sweep through the graph's key, new entries or kept ones."""
    graphs = ForwardGraphs(rows_capacity=1, tokens_capacity=1, capture=False, strict=True)
    plain, want = _sweeps(None)
    w, got = _sweeps(graphs)
    assert got == want and ("SWEEP_K_FULL", 3) in {(t, s) for t, s, _ in got}
    assert {t for t, _, _ in got} >= {"SWEEP_K_FULL", "SWEEP_K_SWA"}
    assert graphs.padded_eager == 5 and w.manager.sweep_passes == plain.manager.sweep_passes == 5
    assert w.manager.health.issued == plain.manager.health.issued
    assert make_world(sweep=1).manager.sweep_graphs is None  # a CPU pool: no graphs


def test_a_failing_sweep_source_is_asked_at_due_steps_only_and_each_step_still_ends() -> None:
    # the watchdog late: a sweep that never runs fails its check (SWEEP counters at zero), an error of its own
    w = make_world(config=CanaryConfig(sweep_interval=3, real_kv_mode=RealKvHashMode.ALL, health_warmup_steps=50))
    a = Req(1, list(range(100, 120)), list(range(1, 5)))
    w.forward([(a, 0, 4)])
    asked: list[int] = []
    failing = [True]

    def source() -> SweepEntries:
        asked.append(w.manager.step)
        if failing[0]:
            raise RuntimeError("the radix walker failed")
        return chain_entries([a])

    w.manager.set_sweep_source(source)
    raised = []
    for _ in range(8):
        try:
            w.step()
        except RuntimeError as err:
            assert "radix walker failed" in str(err)
            raised.append(w.manager.step - 1)  # the step it was raised at has ended
    assert asked == raised == [0, 3, 6]  # the failed sweep counts as the due one: asked again when next due
    assert w.manager.step == 8 and w.manager.sweep_passes == 0
    failing[0] = False
    for _ in range(2):
        w.step()
    assert asked == [0, 3, 6, 9] and w.manager.sweep_passes == 1 and w.manager.step == 10


def test_sweep_entries_that_broke_their_rules_raise_after_the_step_ended() -> None:
    w = make_world(sweep=1)
    a = Req(1, list(range(100, 120)), list(range(1, 5)))
    w.forward([(a, 0, 4)])
    entries = chain_entries([a])
    entries.positions.resize_(1)  # changed after construction: the sweep's own check refuses it
    w.manager.set_sweep_source(lambda: entries)
    with pytest.raises(ValueError, match=r"SweepEntries.positions must be 1-D int64 of length 4"):
        w.step()
    assert w.manager.step == 1 and w.manager.sweep_passes == 0


def test_in_raise_mode_the_steps_own_error_wins_with_the_sweeps_as_its_context() -> None:
    w = make_world(config=CanaryConfig(mode=CanaryMode.RAISE, sweep_interval=1, real_kv_mode=RealKvHashMode.ALL))
    a = Req(1, list(range(100, 130)), list(range(1, 6)))
    w.forward([(a, 0, 3)])
    w.step()
    walker = RuntimeError("the radix walker failed")

    def failed() -> SweepEntries:
        raise walker

    w.manager.set_sweep_source(failed)
    w.k[2, 0, 0] += 1.0  # read by the decode's verifies: the next step's end reports it
    w.forward([(a, 3, 1)])
    with pytest.raises(RuntimeError, match="radix walker failed"):
        w.step()  # step 1: the decode's rows are in its copy, reported at step 2's end
    w.forward([(a, 4, 1)])
    with pytest.raises(RuntimeError) as info:
        w.step()
    assert info.value is not walker and "slot" in str(info.value) and info.value.__context__ is walker
    assert w.manager.step == 3 and {e.violation.slot_idx for e in w.manager.events} == {2}

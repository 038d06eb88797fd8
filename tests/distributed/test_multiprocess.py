"""Real process groups: 2 and 4 spawned CPU ranks on gloo over the loopback, bounded in time.

Each spawn costs a torch import per process, so each group runs several checks (about 5 s for the 2-rank
groups and 8 s for the 4-rank group on 2 cores).
"""

from __future__ import annotations

import random

import pytest

from kvcanary.consts import FailReason
from kvcanary.distributed import spawn_group
from tests.distributed.world import CASES, hang, pd_run, tp_run

REAL_KV = int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)
ADDRESSING = int(FailReason.VERIFY_CHAIN_HASH_MISMATCH | FailReason.VERIFY_POSITION_MISMATCH
                 | FailReason.VERIFY_TOKEN_MISMATCH)


def test_prefill_to_decode_transfer_faults_are_caught_before_first_use() -> None:
    seed = random.randrange(1 << 30)
    found = spawn_group(pd_run, 2, seed, "gloo", "cpu", timeout_s=120)[1]
    assert set(found) == set(CASES)
    assert found["clean"] == []
    for case in CASES[1:]:
        before = [e for e in found[case] if e[0] != "after_decode"]
        assert before, f"{case}: nothing reported by the receiver's verify"
    assert {b for _, _, b in found["flip_kv"]} == {REAL_KV}  # records intact, bytes flipped
    assert all(b & ADDRESSING for tag, _, b in found["wrong_slots"] if tag.startswith("HEAD"))
    assert all(b & ADDRESSING for tag, _, b in found["partial"] if tag.startswith("HEAD"))
    assert any(b & int(FailReason.VERIFY_TOKEN_MISMATCH) for _, _, b in found["stale"])


@pytest.mark.parametrize(("world_size", "bad_rank", "references"), [
    (2, 1, {"rank 0", "ranks without violations"}),  # rank 0 until rank 1's own violations cross over
    (4, 2, {"majority"})])
def test_tensor_parallel_clean_is_silent_and_a_divergent_rank_is_named(world_size: int, bad_rank: int,
                                                                       references: set[str]) -> None:
    bad_step = random.randrange(1, 6)
    views = spawn_group(tp_run, world_size, random.randrange(1 << 30), [(None, 0), (bad_rank, bad_step)],
                        timeout_s=120)
    for clean, bad in views:
        assert clean["clean"] and clean["lines"] == [] and clean["compared"] == 8
        assert bad["diverging"] == [bad_rank]
        steps = [d[0] for d in bad["divergences"]]
        assert steps and steps[0] == bad_step
        assert {d[2] for d in bad["divergences"]} <= references
        assert bad["compared"] == 8
        assert {r for _, r, _ in bad["alerts"]} == {bad_rank}  # its violation total crossed the exchange


def test_a_hung_group_is_ended_not_waited_for() -> None:
    with pytest.raises(TimeoutError, match="still running"):
        spawn_group(hang, 2, 300.0, timeout_s=6)

"""Real process groups: 2 and 4 spawned CPU ranks on gloo over the loopback, bounded in time.

Each spawn costs a torch import per process, so each group runs several checks (about 5 s for the 2-rank
groups and 8 s for the 4-rank group on 2 cores).
"""

from __future__ import annotations

import random

import pytest

from kvcanary.consts import FailReason
from kvcanary.distributed import spawn_group
from tests.distributed.world import CASES, pd_run, tp_run

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


@pytest.mark.parametrize(("world_size", "bad_rank", "reference"), [(2, 1, "rank 0"), (4, 2, "majority")])
def test_tensor_parallel_divergent_rank_is_named_on_every_rank(world_size: int, bad_rank: int,
                                                              reference: str) -> None:
    seed = random.randrange(1 << 30)
    bad_step = random.randrange(1, 6)
    views = spawn_group(tp_run, world_size, seed, bad_rank, bad_step, timeout_s=120)
    for v in views:
        assert v["diverging"] == [bad_rank]
        steps = [d[0] for d in v["divergences"]]
        assert steps and steps[0] == bad_step
        assert all(d[2] == reference for d in v["divergences"])
        assert v["compared"] == 8


def test_tensor_parallel_clean_run_is_silent_on_4_ranks() -> None:
    views = spawn_group(tp_run, 4, random.randrange(1 << 30), None, 0, timeout_s=120)
    assert [v["clean"] for v in views] == [True] * 4
    assert all(v["lines"] == [] and v["compared"] == 8 for v in views)

"""A budgeted forward counts its overflow exactly as a budget-less one, on every path (both count it at HEAD)."""

from __future__ import annotations

import pytest
import torch

from kvcanary.consts import RealKvHashMode
from kvcanary.manager import CanaryCapacities, CanaryConfig, VerifyBudget
from kvcanary.manager.graphs import STAGED_AFTER
from tests.manager.graph_parity import pad_eagerly
from tests.manager.world import Req, World, make_world

CAPS = CanaryCapacities(verify_capacity=4, write_req_capacity=8, write_token_capacity=32, sweep_capacity=8,
                        expected_token_capacity=64)


def _schedule(w: World, seen: list[int], *, keep: bool = False) -> None:
    a = Req(1, list(range(100, 120)), list(range(1, 4)))
    b = Req(2, list(range(200, 220)), [9])
    sched = [[(a, 0, 3), (b, 0, 1)], [(a, 3, 1), (b, 1, 1)], [(a, 4, 1)], [(a, 5, 1), (b, 2, 1)], [],
             [(a, 6, 1), (b, 3, 1)], [(a, 7, 1)]]
    for n, batch in enumerate(sched):
        for r, p, e in batch:
            while len(r.slots) < p + e:
                r.slots.append(20 * r.row + len(r.slots))
        if keep and batch:
            built = w.build(batch, pad_rows=n % 2)
            for _ in range(STAGED_AFTER + 2):  # the engine hands the very batch again
                with w.manager.forward(built):
                    w.write_kv(built.out_cache_loc.tolist())
                seen.append(int(w.manager.state.skipped_verifies[0]))
        else:
            w.forward(batch, pad_rows=n % 2 if batch else 0)
            seen.append(int(w.manager.state.skipped_verifies[0]))
        w.manager.end_step()


@pytest.mark.parametrize("path", ["kept", "swa"])
def test_budget_counts_as_budgetless(path: str) -> None:
    got = {}
    for name, b in (("none", None), ("budget", VerifyBudget(max_entries=3, newest_per_request=1))):
        cfg = CanaryConfig(real_kv_mode=RealKvHashMode.ALL, verify_budget=b)
        w = make_world(capacities=CAPS, config=cfg, swa_window=3 if path == "swa" else 0)
        if path == "kept":
            pad_eagerly(w.manager)
        seen: list[int] = []
        _schedule(w, seen, keep=path == "kept")
        got[name] = seen
    assert got["budget"] == got["none"]
    assert got["none"][-1] > 0


def test_compiled_budget_counts_as_budgetless() -> None:
    torch._dynamo.reset()
    got = {}
    for name, b, comp in (("none", None, False), ("budget", VerifyBudget(max_entries=3, newest_per_request=1), True)):
        cfg = CanaryConfig(real_kv_mode=RealKvHashMode.ALL, verify_budget=b, compile=comp)
        w = make_world(capacities=CAPS, config=cfg)
        seen: list[int] = []
        _schedule(w, seen)
        got[name] = seen
    assert got["budget"] == got["none"]
    assert got["none"][-1] > 0


def test_a_forward_whose_model_raises_counts_alike() -> None:
    """``with manager.forward(batch): model(...)`` where the model raises: HEAD ran, TAIL never does. The two
    managers should agree on the overflow count (both count the overflowed HEAD, or neither)."""
    got = {}
    for name, b in (("none", None), ("budget", VerifyBudget(max_entries=3, newest_per_request=1))):
        w = make_world(capacities=CAPS, config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL, verify_budget=b))
        seen: list[int] = []
        _schedule(w, seen)  # ends with 3 overflowed forwards
        a = Req(1, list(range(100, 120)), list(range(1, 9)))
        batch = w.build([(a, 7, 1)])
        with pytest.raises(RuntimeError, match="model failed"), w.manager.forward(batch):
            raise RuntimeError("model failed")
        got[name] = int(w.manager.state.skipped_verifies[0])
    assert got["budget"] == got["none"], got

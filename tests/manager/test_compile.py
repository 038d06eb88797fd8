"""``CanaryConfig(compile=True)``: the manager's per-forward launches as compiled graphs, same results as eager."""

from __future__ import annotations

import torch
from torch._dynamo.utils import counters

from kvcanary.consts import FailReason, PoolKind, RealKvHashMode
from kvcanary.extensions import Extensions
from kvcanary.manager import CanaryConfig, VerifyBudget
from tests.manager.world import Req, World, make_world


def _workload(w: World) -> None:
    """Two requests sharing a prefix, decoded with padding rows and varying batch sizes; a K flip mid-way."""
    a = Req(1, list(range(100, 130)), list(range(1, 11)))
    b = Req(2, [*range(100, 106), *range(300, 320)], [*range(1, 7), 11, 12, 13])
    c = Req(3, list(range(500, 530)), list(range(40, 44)))
    w.forward([(a, 0, 10)])
    w.step()
    w.forward([(b, 6, 3), (c, 0, 4)])
    w.step()
    for n in range(5):
        a.slots.append(20 + n)
        b.slots.append(30 + n)
        c.slots.append(50 + n)
        reqs = [(a, 10 + n, 1), (b, 9 + n, 1), (c, 4 + n, 1)][: 1 + n % 3]
        if n == 3:
            w.k[5, 0, 0] += 1.0  # a stray write into a live, shared slot's K bytes
        w.forward(reqs, pad_rows=n % 2)
        w.step()


def _config(compile: bool, budget: VerifyBudget | None = None, ext: Extensions | None = None) -> CanaryConfig:
    return CanaryConfig(real_kv_mode=RealKvHashMode.ALL, enable_v=True, enable_verify_token=True,
                        health_warmup_steps=3, health_every=1, compile=compile, verify_budget=budget,
                        extensions=ext)


def _run(compile: bool, budget: VerifyBudget | None = None,
         ext: Extensions | None = None) -> tuple[World, list[tuple[str, int, int]]]:
    w = make_world(config=_config(compile, budget, ext))
    _workload(w)
    if ext is not None and ext.write_slot_owner_mismatch:  # a double allocation: slot 20 handed to row 4 too
        w.forward([(Req(4, list(range(700, 710)), [45, 20]), 0, 2)], pad_rows=1)
        w.step()
    return w, w.events()


def _same_buffers(a: World, b: World) -> None:
    for ga, gb in zip(a.manager.groups, b.manager.groups, strict=True):
        for name in ("k_head", "k_tail", "v_head", "v_tail"):
            assert torch.equal(getattr(ga, name), getattr(gb, name)), name
    sa, sb = a.manager.last_snapshot, b.manager.last_snapshot
    assert sa is not None and sb is not None
    assert sa.kernel_run_counters == sb.kernel_run_counters and sa.slot_run_counters == sb.slot_run_counters


def test_compiled_manager_reports_what_eager_reports_without_graph_breaks() -> None:
    torch._dynamo.reset()
    counters.clear()
    eager, want = _run(False)
    compiled, got = _run(True)
    assert sorted(got) == sorted(want)
    assert any(bits & int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH) for _, _, bits in want)  # the flip was seen
    _same_buffers(eager, compiled)
    assert sum(counters["graph_break"].values()) == 0
    assert int(counters["stats"]["unique_graphs"]) >= 2  # the plan-and-HEAD part and the TAIL part, compiled


def test_compiled_manager_with_a_verification_budget() -> None:
    torch._dynamo.reset()
    counters.clear()
    budget = VerifyBudget(max_entries=16, newest_per_request=2)
    eager, want = _run(False, budget)
    compiled, got = _run(True, budget)
    assert sorted(got) == sorted(want)
    _same_buffers(eager, compiled)
    assert sum(counters["graph_break"].values()) == 0
    assert int(counters["stats"]["unique_graphs"]) >= 2  # the plan-and-HEAD part and the TAIL part, compiled


def test_compiled_manager_with_the_owner_check_claims_what_eager_claims() -> None:
    """The owner map's claims run inside the compiled plan-and-HEAD graph, and report what eager does."""
    torch._dynamo.reset()
    counters.clear()
    ext = Extensions(write_slot_owner_mismatch=True)
    eager, want = _run(False, ext=ext)
    compiled, got = _run(True, ext=ext)
    assert sorted(got) == sorted(want)
    assert [(slot, bits) for _, slot, bits in want if bits & int(FailReason.WRITE_SLOT_OWNER_MISMATCH)]
    _same_buffers(eager, compiled)
    assert eager.manager.owners is not None and compiled.manager.owners is not None
    assert torch.equal(eager.manager.owners.slot_owner(PoolKind.FULL), compiled.manager.owners.slot_owner(PoolKind.FULL))
    assert sum(counters["graph_break"].values()) == 0

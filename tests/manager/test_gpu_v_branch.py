"""On a GPU: a captured forward with V's endpoints on a second stream (the manager's own bucket graphs, and an
engine's capture of its forward) leaves every device buffer byte-identical to the same forwards run eagerly (the
ring's rows as a multiset), reports the same violation rows (a multiset) with the same tags in the same order
(the read-back puts K's rows first again), with and without a budget, on the cuda and Triton backends; the side
stream allocates nothing inside the capture."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import torch

from kvcanary.consts import RealKvHashMode
from kvcanary.manager import CanaryBatch, CanaryConfig, VerifyBudget
from kvcanary.manager import branch as branch_module
from kvcanary.manager.branch import VBranch
from kvcanary.registry import REGISTRY, BackendError, Op
from tests.manager.graph_parity import device_buffers, differences
from tests.manager.world import Req, World, make_world

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

FORWARDS = 5
Row = tuple[int, ...]


def _world(backend: str, *, budget: bool, graphs: bool) -> tuple[World, CanaryBatch]:
    """Two prefilled requests; the newest entry of request ``a`` (verified by every forward, budget or not) has
    its K and V HEAD records' stored chain hash (bytes 16-23, which HEAD's verify checks) and its K and V bytes (TAIL's
    real-KV hash) corrupted, so every forward's HEAD and TAIL report on both halves; then their decode batch (not
    run)."""
    try:
        for op in (Op.PLAN, Op.VERIFY, Op.WRITE, Op.VERIFY_BUDGET, Op.SCATTER):
            REGISTRY.select(op, torch.device("cuda"), backend)
    except BackendError as err:
        pytest.skip(f"{backend} cannot serve on this machine: {err}")
    cfg = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, backend=backend, graphs=graphs,
                       verify_budget=VerifyBudget(max_entries=6, newest_per_request=1) if budget else None)
    w = make_world(config=cfg, device="cuda")
    a = Req(1, list(range(100, 130)), list(range(1, 11)))
    c = Req(3, list(range(500, 530)), list(range(40, 44)))
    w.forward([(a, 0, 10), (c, 0, 4)])
    w.step()
    a.slots.append(20)
    c.slots.append(50)
    batch = w.build([(a, 10, 1), (c, 4, 1)])
    g = w.manager.groups[0]
    assert g.v_head is not None
    newest = a.slots[9]
    g.k_head[newest].view(torch.uint8)[16] ^= 0x20
    g.v_head[newest].view(torch.uint8)[16] ^= 0x20
    w.k[newest, 0, 0] += 1.0
    w.v[newest, 0, 0] += 1.0
    return w, batch


def _rows(w: World) -> list[Row]:
    w.manager.flush()
    torch.cuda.synchronize()
    return [(e.violation.kernel_kind, e.violation.slot_idx, e.violation.position, e.violation.stored_token,
             e.violation.expected_token, e.violation.stored_chain_hash, e.violation.expected_aux,
             e.violation.fail_reason_bits) for e in w.manager.events]


@pytest.fixture(autouse=True)
def _fork_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork is off by default in a manager (until measured on a GPU); these tests turn it on."""
    monkeypatch.setattr(branch_module, "ON_BY_DEFAULT", True)


def _eager(backend: str, budget: bool) -> World:
    w, batch = _world(backend, budget=budget, graphs=False)
    for _ in range(FORWARDS):
        w.manager.prepare(batch)
        w.manager.head(batch)
        w.manager.tail()
    return w


def _no_side_allocations(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every fork's side launches, checked: the allocations the caching allocator made while they were issued."""
    made: list[int] = []
    launch = VBranch.launch

    def checked(self: VBranch, main: Callable[[], None], side: Callable[[], None]) -> None:
        def counted() -> None:
            before = torch.cuda.memory_stats()["allocation.all.allocated"]
            side()
            made.append(torch.cuda.memory_stats()["allocation.all.allocated"] - before)
        launch(self, main, counted)
    monkeypatch.setattr(VBranch, "launch", checked)
    return made


def _same(forked: World, eager: World) -> None:
    want, got = _rows(eager), _rows(forked)
    tags = {r[0] for r in want}
    assert {0, 1, 2, 3} <= tags, f"every phase and half must report: {sorted(tags)}"
    assert Counter(got) == Counter(want)
    assert [r[0] for r in got] == [r[0] for r in want]  # K's rows before V's in each phase, as in turn
    assert differences(device_buffers(forked.manager), device_buffers(eager.manager), ring_as_multiset=True) == []


@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("budget", [False, True])
def test_the_managers_own_graphs_fork_v_and_report_as_eager(backend: str, budget: bool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    made = _no_side_allocations(monkeypatch)
    eager = _eager(backend, budget)
    w, batch = _world(backend, budget=budget, graphs=True)
    for _ in range(FORWARDS):
        w.manager.prepare(batch)
        w.manager.head(batch)
        w.manager.tail()
    branch = w.manager.branch
    graphs = w.manager.graphs[0]
    assert branch is not None and graphs is not None
    assert graphs.replays > 0 and branch.forks >= 2, (graphs.replays, branch.forks)
    assert branch.pairs == {0, 1}
    assert made and set(made) == {0}, made
    _same(w, eager)


@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("budget", [False, True])
def test_an_engine_captured_forward_forks_v_and_reports_as_eager(backend: str, budget: bool,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    made = _no_side_allocations(monkeypatch)
    eager = _eager(backend, budget)
    w, batch = _world(backend, budget=budget, graphs=False)
    w.manager.prepare(batch)
    engine_graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(engine_graph):
        w.manager.head(batch)
        w.manager.tail()
    branch = w.manager.branch
    assert branch is not None and branch.forks == 2 and branch.pairs == {0, 1}
    assert made and set(made) == {0}, made
    for _ in range(FORWARDS):
        engine_graph.replay()
    _same(w, eager)


def test_an_eager_forward_on_a_gpu_does_not_fork() -> None:
    w, batch = _world("triton", budget=False, graphs=False)
    w.manager.prepare(batch)
    w.manager.head(batch)
    w.manager.tail()
    assert w.manager.branch is not None and w.manager.branch.forks == 0
    assert not w.manager._pump.forked_pairs

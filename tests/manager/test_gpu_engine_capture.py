"""On a GPU: a budgeted forward the engine captures in its own graph (the manager's launches unbucketed inside
it: the staging ``torch.cat``, the plan, the filter, the verifies and writes, the overflow count), replayed,
leaves every device buffer byte-identical to the same forwards run eagerly (the ring's rows as a multiset), on
the cuda and Triton backends."""

from __future__ import annotations

import pytest
import torch

from kvcanary.consts import RealKvHashMode
from kvcanary.manager import CanaryBatch, CanaryConfig, VerifyBudget
from kvcanary.registry import REGISTRY, BackendError, Op
from tests.manager.graph_parity import device_buffers, differences
from tests.manager.world import Req, World, make_world

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

REPLAYS = 4


def _world(backend: str) -> tuple[World, CanaryBatch]:
    """Two prefilled requests, a K byte of a live slot flipped (so the verifies report), and their decode."""
    try:
        for op in (Op.PLAN, Op.VERIFY, Op.WRITE, Op.VERIFY_BUDGET):
            REGISTRY.select(op, torch.device("cuda"), backend)
    except BackendError as err:
        pytest.skip(f"{backend} cannot serve on this machine: {err}")
    cfg = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, backend=backend, graphs=False,
                       verify_budget=VerifyBudget(max_entries=6, newest_per_request=1))
    w = make_world(config=cfg, device="cuda")
    a = Req(1, list(range(100, 130)), list(range(1, 11)))
    c = Req(3, list(range(500, 530)), list(range(40, 44)))
    w.forward([(a, 0, 10), (c, 0, 4)])
    w.step()
    a.slots.append(20)
    c.slots.append(50)
    batch = w.build([(a, 10, 1), (c, 4, 1)])
    w.k[5, 0, 0] += 1.0
    return w, batch


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_an_engine_captured_budgeted_forward_equals_eager(backend: str) -> None:
    eager, batch = _world(backend)
    for _ in range(REPLAYS):
        eager.manager.prepare(batch)
        eager.manager.head(batch)
        eager.manager.tail()
    graphed, gbatch = _world(backend)
    engine_graph = torch.cuda.CUDAGraph()
    graphed.manager.prepare(gbatch)
    with torch.cuda.graph(engine_graph):
        graphed.manager.head(gbatch)
        graphed.manager.tail()
    for _ in range(REPLAYS):
        engine_graph.replay()
    torch.cuda.synchronize()
    want, got = device_buffers(eager.manager), device_buffers(graphed.manager)
    assert int(want["write_index"].reshape(-1)[0]) > 0, "the flip must show"
    assert differences(got, want, ring_as_multiset=True) == []

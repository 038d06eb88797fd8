"""The manager's owner map on the GPU: with the write-time owner check on, a forward whose head and tail are
captured in a CUDA graph and replayed claims and reports exactly what the eager torch_ref manager does on
the CPU (a prefix share silent, a double allocation caught at the write, naming both rows)."""

from __future__ import annotations

import pytest
import torch

from kvcanary.consts import PoolKind, RealKvHashMode
from kvcanary.extensions import Extensions
from kvcanary.manager import CanaryConfig
from tests.backends.cuda import _support
from tests.manager.world import Req, World, make_world

_SKIP = _support.cuda_skip_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_SKIP is not None, reason=f"cuda backend unavailable: {_SKIP}")]

Row = tuple[str, int, int, int, tuple[int, int] | None]


def _world(device: str, backend: str) -> World:
    cfg = CanaryConfig(real_kv_mode=RealKvHashMode.ALL, enable_v=True, enable_verify_token=True,
                       health_warmup_steps=3, health_every=1, backend=backend,
                       extensions=Extensions(write_slot_owner_mismatch=True, write_slot_mismatch=True))
    return make_world(config=cfg, device=device)


def _run(device: str, backend: str, *, capture: bool) -> tuple[list[Row], list[int]]:
    w = _world(device, backend)
    a = Req(1, list(range(100, 120)), [5, 6, 7, 8, 9, 10])
    w.forward([(a, 0, 4)], pad_rows=1)  # eager: the backend's kernels are built before any capture
    w.step()
    b = Req(2, [*range(100, 104), 500, 501], [5, 6, 7, 8, 30, 9])  # a prefix share, then slot 9 handed twice
    batch = w.build([(a, 4, 1), (b, 4, 2)], pad_rows=1)
    m = w.manager
    m.prepare(batch)
    if capture:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            m.head(batch)
            m.tail()
        graph.replay()
    else:
        m.head(batch)
        m.tail()
    w.step()
    m.flush()
    rows = [(e.violation.tag_name, e.violation.slot_idx, e.violation.position, e.violation.fail_reason_bits,
             e.violation.owners) for e in m.events]
    assert m.owners is not None
    return sorted(rows), m.owners.slot_owner(PoolKind.FULL).cpu().tolist()


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_captured_owner_claims_equal_eager_torch_ref(backend: str) -> None:
    want_rows, want_map = _run("cpu", "torch_ref", capture=False)
    assert [r for r in want_rows if r[4] is not None], "the double allocation was not caught"
    assert all(r[4] == (1, 2) or r[4] == (2, 1) for r in want_rows if r[4] is not None)
    eager = _run("cuda", backend, capture=False)
    captured = _run("cuda", backend, capture=True)
    assert eager == (want_rows, want_map)
    assert captured == (want_rows, want_map)

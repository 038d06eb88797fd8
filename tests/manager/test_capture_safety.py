"""The per-forward path (head, tail) never reads a device value on the host, so it can be captured.

A recording backend stands in for the kernels (so only the manager's own code and the launchers'
contract checks run), and every way a tensor's value can reach Python is made to raise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch

from kvcanary.consts import RealKvHashMode
from kvcanary.extensions import Extensions
from kvcanary.manager import CanaryBatch, CanaryConfig, CanaryManager, VerifyBudget
from kvcanary.registry import REGISTRY, Backend, Op, OpSupport, register_backend
from tests.manager.host_reads import no_host_reads
from tests.manager.test_rotation import layered_world
from tests.manager.world import Req, World, make_world

CALLS: list[str] = []


def record_plan(_call: object) -> None:
    CALLS.append("plan")


def record_verify(_call: object) -> None:
    CALLS.append("verify")


def record_write(_call: object) -> None:
    CALLS.append("write")


def record_scatter(_call: object) -> None:
    CALLS.append("scatter")


def record_budget(_call: object) -> None:
    CALLS.append("budget")


_HERE = "tests.manager.test_capture_safety"
_NAME = "recording_test_backend"


@pytest.fixture
def recording_backend() -> Iterator[str]:
    ops = {op: OpSupport(f"{_HERE}:record_{fn}", {"*": 0}, capture_safe=True)
           for op, fn in ((Op.PLAN, "plan"), (Op.VERIFY, "verify"), (Op.WRITE, "write"), (Op.SCATTER, "scatter"),
                      (Op.VERIFY_BUDGET, "budget"))}
    register_backend(Backend(name=_NAME, description="records launches (test double)", ops=ops), replace=True)
    CALLS.clear()
    yield _NAME
    REGISTRY.unregister(_NAME)


def _head_and_tail(w: World, batch: CanaryBatch, monkeypatch: pytest.MonkeyPatch) -> None:
    """``batch``'s prepare (which may read host snapshots), then its head and tail with no host read allowed,
    recording only their launches."""
    w.manager.prepare(batch)
    CALLS.clear()
    with no_host_reads(monkeypatch):
        w.manager.head(batch)
        w.manager.tail()


def test_head_and_tail_do_no_host_reads(recording_backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, enable_verify_token=True,
                       backend=recording_backend)
    w = make_world(config=cfg, swa_window=4)
    a = Req(1, list(range(100, 120)), list(range(1, 9)))
    batch = w.forward([(a, 0, 8)])  # a full lifecycle first (prepare may read host snapshots)
    _head_and_tail(w, batch, monkeypatch)
    # FULL and SWA groups: one plan each, HEAD and TAIL verify + write for K and V
    assert CALLS.count("plan") == 2 and CALLS.count("verify") == 8 and CALLS.count("write") == 8


def test_the_guard_itself_catches_a_host_read(monkeypatch: pytest.MonkeyPatch) -> None:
    t = torch.ones(1)
    with no_host_reads(monkeypatch):
        with pytest.raises(AssertionError):
            int(t)
        with pytest.raises(AssertionError):
            t.item()


def test_extensions_and_layer_rotation_do_no_host_reads(recording_backend: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """With every extension on (the owner map's claims included) and a layer rotation, head and tail still
    launch only (capturable)."""
    w = layered_world(3, 2)
    w.manager = CanaryManager.attach(
        pool=w.manager.pool, capacities=w.manager.capacities,
        config=dataclasses.replace(w.manager.config, backend=recording_backend,
                                   extensions=Extensions(zero_slot_in_live_range=True, write_slot_mismatch=True,
                                                         write_slot_owner_mismatch=True)))
    a = Req(1, list(range(100, 120)), list(range(1, 9)))
    batch = w.forward([(a, 0, 8)])
    _head_and_tail(w, batch, monkeypatch)
    # one plan; HEAD and TAIL verify + write for K and V; then 3 rotation sets: a verify and a write each
    assert CALLS.count("plan") == 1 and CALLS.count("verify") == 4 + 3 and CALLS.count("write") == 4 + 3


def test_the_bucketed_path_does_no_host_reads(recording_backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The padded staging and launches of a graph bucket (CanaryConfig.graphs), with a budget and SWA: launches
    and device ops only, so the manager can capture them."""
    from tests.manager.graph_parity import pad_eagerly

    cfg = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True, enable_verify_token=True,
                       backend=recording_backend, verify_budget=VerifyBudget(max_entries=12, newest_per_request=1))
    w = make_world(config=cfg, swa_window=4)
    graphs = pad_eagerly(w.manager)
    a = Req(1, list(range(100, 120)), list(range(1, 9)))
    batch = w.forward([(a, 0, 8)], pad_rows=2)
    _head_and_tail(w, batch, monkeypatch)
    assert graphs[0].padded_eager == 4  # HEAD and TAIL of both forwards went through the bucket
    assert CALLS.count("plan") == 2 and CALLS.count("verify") == 8 and CALLS.count("write") == 8
    assert CALLS.count("budget") == 2  # one filter launch per plan: the budget's HEAD and TAIL share it

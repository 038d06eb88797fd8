"""The demo engine with every manager on its bucketed path (``CanaryConfig(graphs=...)``'s padded launches, run
eagerly on the CPU: what the graphs replay on a GPU) leaves every canary buffer byte-identical to the unpadded
launches, over the clean workload and faulty ones: the clean run stays silent and the faults are caught."""

from __future__ import annotations

import pytest

from kvcanary.demo import DemoSettings
from kvcanary.demo.engine import Engine, drive
from kvcanary.demo.engine.faults import Fault
from kvcanary.demo.run import build_engines
from kvcanary.manager import CanaryCapacities, CanaryConfig, CanaryManager
from kvcanary.manager.graphs import ForwardGraphs
from tests.manager.graph_parity import device_buffers, differences

STEPS = 30


def _padded_graphs(_self: CanaryManager, _config: CanaryConfig, caps: CanaryCapacities) -> ForwardGraphs:
    return ForwardGraphs(rows_capacity=caps.write_req_capacity, tokens_capacity=caps.write_token_capacity,
                         capture=False, strict=True)


def _run(fault: Fault | None, extensions: bool) -> tuple[Engine, Engine]:
    engine, peer, workload = build_engines(fault, DemoSettings(steps=STEPS), extensions=extensions)
    drive(engine, workload, STEPS)
    engine.flush_canaries()
    peer.flush_canaries()
    return engine, peer


def _managers(engine: Engine, peer: Engine) -> dict[str, CanaryManager]:
    out = {"decode": engine.canary, "draft": engine.draft_canary, "prefill": peer.canary}
    return {k: m for k, m in out.items() if m is not None}


@pytest.mark.parametrize(("fault", "extensions"), [
    (None, False), (Fault.PADDING_ROW_WRITE, False), (Fault.KV_FLIP_USED, False),
    (Fault.DRAFT_PAST_ALLOCATION, True)])
def test_padded_buckets_match_the_unpadded_launches(fault: Fault | None, extensions: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    want = _managers(*_run(fault, extensions))
    with monkeypatch.context() as m:
        m.setattr(CanaryManager, "_graphs", _padded_graphs)
        got = _managers(*_run(fault, extensions))
    assert sorted(got) == sorted(want)
    padded = 0
    for name, mgr in got.items():
        padded += sum(g.padded_eager for g in mgr.graphs if g is not None)
        assert differences(device_buffers(mgr), device_buffers(want[name])) == [], name
        assert [e.violation for e in mgr.events] == [e.violation for e in want[name].events], name
        assert mgr.health.issued == want[name].health.issued, name
    assert padded > 0, "the bucketed path never ran"
    if fault is None:
        assert all(m.events == [] for m in got.values())
    else:
        assert any(m.events for m in got.values()), f"{fault.value} went unnoticed on the bucketed path"

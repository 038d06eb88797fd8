"""On a GPU: the manager's HEAD and TAIL replayed from its own CUDA graphs (``CanaryConfig(graphs=True)``) leave
every device buffer byte-identical to the eager launches (``graphs=False``), on the cuda and Triton backends
(the ring's rows as a multiset: the kernels append them in no fixed order); the watchdog counts replayed
launches; a backend that cannot run under capture turns the graphs off (``graphs=None``) or is refused
(``graphs=True``); a forward the engine itself captures goes into the engine's graph."""

from __future__ import annotations

import logging

import pytest
import torch

from benchmarks.bench_manager_graphs import OpCount
from kvcanary.consts import FailReason, RealKvHashMode
from kvcanary.manager import CanaryBatch, CanaryConfig, VerifyBudget
from kvcanary.manager.graphs import STAGED_AFTER
from kvcanary.registry import REGISTRY, BackendError, Op
from tests.manager.graph_parity import device_buffers, differences, workload
from tests.manager.world import Req, World, chain_entries, make_world

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

RKV = int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)


def _backend_or_skip(name: str) -> str:
    try:
        for op in (Op.PLAN, Op.VERIFY, Op.WRITE, Op.SCATTER):
            REGISTRY.select(op, torch.device("cuda"), name)
    except BackendError as err:
        pytest.skip(f"{name} cannot serve on this machine: {err}")
    return name


def _config(backend: str, graphs: bool | None, **kw: object) -> CanaryConfig:
    base: dict[str, object] = dict(real_kv_mode=RealKvHashMode.ALL, enable_v=True, enable_verify_token=True,
                                   health_warmup_steps=3, health_every=1, backend=backend, graphs=graphs)
    base.update(kw)
    return CanaryConfig(**base)  # type: ignore[arg-type]


def _run(cfg: CanaryConfig) -> World:
    w = make_world(config=cfg, device="cuda")
    workload(w, decodes=9)
    w.manager.flush()
    torch.cuda.synchronize()
    return w


@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("variant", ["full", "budget", "k_only_partial"])
def test_graph_replay_equals_eager_byte_for_byte(backend: str, variant: str) -> None:
    _backend_or_skip(backend)
    variants: dict[str, dict[str, object]] = {
        "full": {},
        "budget": {"verify_budget": VerifyBudget(max_entries=12, newest_per_request=1)},
        "k_only_partial": {"real_kv_mode": RealKvHashMode.PARTIAL, "enable_v": False, "enable_verify_token": False},
    }
    extra = variants[variant]
    eager = _run(_config(backend, False, **extra))
    graphed = _run(_config(backend, True, **extra))
    graphs = [g for g in graphed.manager.graphs if g is not None]
    assert graphs and sum(g.captures for g in graphs) > 0 and sum(g.replays for g in graphs) > 0
    assert eager.manager.graphs == [None]
    assert differences(device_buffers(graphed.manager), device_buffers(eager.manager), ring_as_multiset=True) == []
    key = lambda e: (e.violation.tag_name, e.violation.slot_idx, e.violation.fail_reason_bits)  # noqa: E731
    assert sorted(map(key, graphed.manager.events)) == sorted(map(key, eager.manager.events))
    if variant == "full":
        assert any(e.violation.fail_reason_bits & RKV for e in eager.manager.events), "the flip must show"
    # the watchdog counted every replayed launch as issued (its checks ran every step and passed)
    assert graphed.manager.health.issued == eager.manager.health.issued
    assert graphed.manager.health.state == "ok" and graphed.manager.health.failure is None


def test_the_default_is_on_for_a_cuda_pool() -> None:
    _backend_or_skip("cuda")
    w = _run(_config("cuda", None))
    g = w.manager.graphs[0]
    assert g is not None and g.enabled and g.replays > 0


def test_a_backend_that_cannot_be_captured_turns_the_default_graphs_off(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="kvcanary.manager"):
        graphed = _run(_config("torch_ref", None))
    g = graphed.manager.graphs[0]
    assert g is not None and not g.enabled and g.replays == 0
    assert any("graphs are off" in r.getMessage() for r in caplog.records)
    eager = _run(_config("torch_ref", False))
    assert differences(device_buffers(graphed.manager), device_buffers(eager.manager)) == []


def test_graphs_true_with_a_backend_that_cannot_be_captured_is_an_error() -> None:
    w = make_world(config=_config("torch_ref", True), device="cuda")
    a = Req(1, list(range(100, 130)), list(range(1, 11)))
    with pytest.raises(RuntimeError, match=r"CanaryConfig\.graphs=True, but capturing the head launches"):
        w.forward([(a, 0, 10)])


def test_a_forward_the_engine_captures_goes_into_the_engine_graph() -> None:
    _backend_or_skip("cuda")
    w = make_world(config=_config("cuda", True), device="cuda")
    a = Req(1, list(range(100, 130)), list(range(1, 11)))
    w.forward([(a, 0, 10)])  # a first forward, eager (compiles and loads the kernels)
    a.slots.append(20)
    batch = w.forward([(a, 10, 1)])
    g = w.manager.graphs[0]
    assert g is not None
    before = (g.captures, g.replays, g.padded_eager, list(w.manager.health.issued))
    engine_graph = torch.cuda.CUDAGraph()
    w.manager.prepare(batch)
    with torch.cuda.graph(engine_graph):
        w.manager.head(batch)
        w.manager.tail()
    assert (g.captures, g.replays, g.padded_eager, list(w.manager.health.issued)) == before
    counters = w.manager.state.kernel_run_counters.clone()
    engine_graph.replay()
    torch.cuda.synchronize()
    assert bool((w.manager.state.kernel_run_counters > counters).any())


def _captured_decode() -> tuple[World, CanaryBatch]:
    """A cuda world with the graphs on whose decode bucket is captured (its first use ran eagerly), and a next
    decode batch of that bucket."""
    _backend_or_skip("cuda")
    w = make_world(config=_config("cuda", True, real_kv_mode=RealKvHashMode.PARTIAL, enable_verify_token=False),
                   device="cuda")
    a = Req(1, list(range(100, 130)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    a.slots += [20, 21]
    w.forward([(a, 10, 1)])  # the decode bucket's first use: eager, then captured
    batch = w.build([(a, 11, 1)])
    return w, batch


def test_a_replayed_forward_dispatches_only_its_staging_copy() -> None:
    """With real graphs: once a bucket is captured, a forward of it dispatches one torch operator on the host (the
    padded staging copy) in prepare + head, and none in tail: everything else is the two replays."""
    w, batch = _captured_decode()
    g = w.manager.graphs[0]
    assert g is not None
    replays = g.replays
    head, tail = OpCount(), OpCount()
    with head:
        w.manager.prepare(batch)
        w.manager.head(batch)
    with tail:
        w.manager.tail()
    torch.cuda.synchronize()
    assert g.replays == replays + 2
    assert head.ops == {"aten.cat.out": 1} and tail.ops == {}


def test_a_replayed_forward_asks_about_capture_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Around a replayed bucket the host asks whether a graph is being captured once in prepare + head (the
    bucket's check, which the watchdog's count reuses) and not at all in tail; the count is still one per phase."""
    w, batch = _captured_decode()
    w.manager.prepare(batch)
    w.manager.head(batch)
    w.manager.tail()  # the batch's first forward: the bucket is looked up
    real = torch._C._cuda_isCurrentStreamCapturing
    calls: list[str] = []
    phase = ["head"]

    def counted() -> bool:
        calls.append(phase[0])
        return real()

    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", counted)
    issued = list(w.manager.health.issued)
    g = w.manager.graphs[0]
    assert g is not None
    replays = g.replays
    w.manager.prepare(batch)  # the very batch again: the kept bucket
    w.manager.head(batch)
    phase[0] = "tail"
    w.manager.tail()
    torch.cuda.synchronize()
    assert calls == ["head"] and g.replays == replays + 2
    grown = [n - o for n, o in zip(w.manager.health.issued, issued, strict=True)]
    forward_tags = {int(t) for t in w.manager.active_tags if not t.name.startswith("SWEEP")}
    assert grown == [int(i in forward_tags) for i in range(len(grown))]  # each HEAD and TAIL tag once


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_sweeps_replayed_from_the_graph_equal_eager_sweeps(backend: str) -> None:
    """The sweep's verify launches, captured after its first run and replayed by every later sweep (new entries
    copied into the plans before the replay, or the kept ones), leave the device as the eager sweeps do."""
    _backend_or_skip(backend)

    def run(graphs: bool) -> World:
        w = make_world(config=_config(backend, graphs, sweep_interval=1), device="cuda")
        a = Req(1, list(range(100, 120)), list(range(1, 11)))
        w.forward([(a, 0, 10)])
        kept = chain_entries([a])
        for i, entries in enumerate([kept, kept, chain_entries([a]), kept, chain_entries([a]), kept]):
            if i == 2:
                w.k[3] += 1.0
            if i == 4:
                w.v[7] += 1.0
            w.manager.set_sweep_source(lambda e=entries: e)  # type: ignore[misc]
            w.step()
        w.manager.flush()
        torch.cuda.synchronize()
        return w

    eager, graphed = run(False), run(True)
    g = graphed.manager.sweep_graphs
    assert eager.manager.sweep_graphs is None and g is not None and g.captures == 1 and g.replays == 5
    assert differences(device_buffers(graphed.manager), device_buffers(eager.manager), ring_as_multiset=True) == []
    key = lambda e: (e.violation.tag_name, e.violation.slot_idx, e.violation.fail_reason_bits)  # noqa: E731
    assert sorted(map(key, graphed.manager.events)) == sorted(map(key, eager.manager.events))
    assert {"SWEEP_K_FULL", "SWEEP_V_FULL"} <= {e.violation.tag_name for e in graphed.manager.events}
    assert graphed.manager.health.issued == eager.manager.health.issued


def test_a_kept_batch_dispatches_nothing_around_its_staged_replay() -> None:
    """The very batch handed again (its values refilled in place): from its STAGED_AFTER-th reuse its HEAD is one
    replay of the staged graph, the staging copy inside it, so prepare + head + tail dispatch no torch operator."""
    _backend_or_skip("cuda")
    w = make_world(config=_config("cuda", True, real_kv_mode=RealKvHashMode.PARTIAL, enable_verify_token=False),
                   device="cuda")
    a = Req(1, list(range(100, 130)), list(range(1, 11)))
    w.forward([(a, 0, 10)])
    a.slots.append(20)
    batch = w.build([(a, 10, 1)])
    g = w.manager.graphs[0]
    assert g is not None
    for _ in range(STAGED_AFTER + 1):  # the batch's first forward, its reuses up to the staged graph's capture
        w.manager.prepare(batch)
        w.manager.head(batch)
        w.manager.tail()
    captures, replays = g.captures, g.replays
    ops = OpCount()
    with ops:
        w.manager.prepare(batch)
        w.manager.head(batch)
        w.manager.tail()
    torch.cuda.synchronize()
    assert ops.ops == {} and g.replays == replays + 2 and g.captures == captures

"""The read-back folded into the TAIL graph: a bucketed forward's TAIL ends with the pump's copy into its next host
buffer (one TAIL graph per buffer), and a step's end whose TAIL copied, with nothing launched since, records the
event and copies nothing. A sweep or another forward after that TAIL makes the step's end copy again. Every step's
stats and snapshot, and every buffer and report, equal those of the same steps run eagerly; the pump still reads
each step a step later."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from kvcanary.consts import RealKvHashMode
from kvcanary.distributed import TransferVerifier
from kvcanary.manager import CanaryConfig, StepStats
from kvcanary.manager.graphs import Bucket, ForwardGraphs
from kvcanary.manager.pump import HostSnapshot
from tests.manager.graph_parity import device_buffers, differences, pad_eagerly
from tests.manager.world import Req, World, chain_entries, make_world


def _config(*, sweep: int = 0) -> CanaryConfig:
    return CanaryConfig(real_kv_mode=RealKvHashMode.ALL, enable_v=True, enable_verify_token=False, sweep_interval=sweep,
                        health_warmup_steps=2, health_every=1)


_Step = tuple[StepStats, HostSnapshot | None, int]


def _run(w: World, *, second_forward_at: int = -1) -> list[_Step]:
    """Two requests prefilled, then ten decodes of both, a K byte flipped at the fourth; at
    ``second_forward_at`` a second forward (a decode of the first request alone) in the same step. Per step:
    the stats, the snapshot read and the copies the pump issued itself."""
    a, b = Req(1, list(range(100, 130)), [1, 2, 3]), Req(2, list(range(200, 230)), [4, 5])
    if w.manager._sweep.enabled:
        w.manager.set_sweep_source(lambda: chain_entries([a, b]))
    out: list[_Step] = []
    pump = w.manager._pump

    def step() -> None:
        before = pump.copies
        stats = w.manager.end_step()
        out.append((stats, w.manager.last_snapshot, pump.copies - before))

    w.forward([(a, 0, 3), (b, 0, 2)])
    step()
    for n in range(10):
        a.slots.append(20 + n)
        b.slots.append(30 + n)
        if n == 3:
            w.k[2, 0, 0] += 1.0  # a stray write into a live slot's K bytes (a prompt slot of a)
        w.forward([(a, 3 + n, 1), (b, 2 + n, 1)])
        if n == second_forward_at:
            w.forward([(a, 3 + n, 1)])  # the same decode again: its HEAD comes after the first TAIL's copy
        step()
    return out


def _compare(graphed: list[_Step], eager: list[_Step]) -> None:
    assert [(s, snap) for s, snap, _ in graphed] == [(s, snap) for s, snap, _ in eager]
    assert any(s.violations for s, _, _ in eager), "the flip must show"
    assert all(snap is None or s.step - snap.step == 1 for s, snap, _ in graphed)  # read a step later


@pytest.mark.parametrize("sweep", [0, 3], ids=["no-sweep", "sweep-every-3"])
def test_a_bucketed_step_copies_in_its_tail_and_ends_as_eager_steps_do(sweep: int) -> None:
    graphed, eager = make_world(config=_config(sweep=sweep)), make_world(config=_config(sweep=sweep))
    pad_eagerly(graphed.manager)
    g_steps, e_steps = _run(graphed), _run(eager)
    _compare(g_steps, e_steps)
    assert all(c == 1 for _, _, c in e_steps)  # eager forwards: the step's end copies
    swept = [sweep > 0 and i % sweep == 0 for i in range(len(g_steps))]  # first step, then every ``sweep``
    assert [c for _, _, c in g_steps] == [int(s) for s in swept]  # the TAIL copied, unless a sweep came after it
    assert graphed.manager.sweep_passes == sum(swept)
    graphed.manager.flush()
    eager.manager.flush()
    assert differences(device_buffers(graphed.manager), device_buffers(eager.manager)) == []


def test_a_forward_after_the_tails_copy_makes_the_step_end_copy() -> None:
    graphed, eager = make_world(config=_config()), make_world(config=_config())
    pad_eagerly(graphed.manager)
    g_steps, e_steps = _run(graphed, second_forward_at=5), _run(eager, second_forward_at=5)
    _compare(g_steps, e_steps)
    # the second forward's own TAIL copied again: still no copy at the step's end
    assert [c for _, _, c in g_steps] == [0] * len(g_steps)
    graphed.manager._forwards[0].graphs = None  # an eager forward after a bucketed one: its TAIL copies nothing
    a = Req(3, list(range(300, 330)), [6])
    graphed.forward([(a, 0, 1)])
    before = graphed.manager._pump.copies
    graphed.manager.end_step()
    assert graphed.manager._pump.copies == before + 1


def test_a_head_without_its_tail_makes_the_step_end_copy() -> None:
    """A forward that failed between HEAD and TAIL (the engine's model raised): the HEAD's launches came after the
    previous TAIL's copy, so the step's end copies."""
    w = make_world(config=_config())
    pad_eagerly(w.manager)
    a = Req(1, list(range(100, 130)), [1, 2, 3])
    w.forward([(a, 0, 3)])
    batch = w.build([(a, 0, 3)])
    w.manager.prepare(batch)
    w.manager.head(batch)
    pump = w.manager._pump
    before = pump.copies
    with pytest.raises(RuntimeError, match="abort_forward"):  # the HEAD waits for its TAIL
        w.manager.end_step()
    w.manager.abort_forward()  # the engine's model raised: this forward has no TAIL
    w.manager.end_step()
    assert pump.copies == before + 1


def test_a_capture_seen_by_the_watchdogs_count_turns_the_fold_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launches of a phase issued while a graph is being captured (the engine's) are not counted, and from
    then on the TAIL copies nothing for the pump: every step's end copies itself."""
    w = make_world(config=_config())
    pad_eagerly(w.manager)
    issued = list(w.manager.health.issued)
    with monkeypatch.context() as m:
        m.setattr(w.manager, "_on_cuda", True)
        m.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: True)
        w.manager._count(w.manager._tail_ids)
    assert w.manager.health.issued == issued
    assert all(r.readback is None for r in w.manager._forwards)
    a = Req(1, list(range(100, 130)), [1, 2, 3])
    w.forward([(a, 0, 3)])
    before = w.manager._pump.copies
    w.manager.end_step()
    assert w.manager._pump.copies == before + 1 and w.manager.events == []


class _FakeStream:
    """A stream that records which streams it was made to wait for."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.waited: list[str] = []

    def wait_stream(self, other: _FakeStream) -> None:
        self.waited.append(other.name)


@pytest.mark.parametrize("tails_on", [["A"], ["B"], ["A", "B"], ["B", "A", "B"]], ids="-".join)
def test_a_step_end_waits_for_every_stream_a_tail_copied_on(tails_on: list[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """TAILs of one step copy into the same read-back buffer, each on the stream it ran on: the step's end (on A)
    waits for every other one before its copy and event, and copies itself unless every TAIL ran on A."""
    w = make_world(config=_config())
    pad_eagerly(w.manager)
    pump = w.manager._pump
    streams = {n: _FakeStream(n) for n in "AB"}
    on = ["A"]
    monkeypatch.setattr(pump, "_record", [lambda s: None] * 2)  # as on a CUDA device: events recorded per stream
    monkeypatch.setattr(pump, "_current_stream", lambda: streams[on[0]])
    a = Req(1, list(range(100, 130)), [1, 2, 3])
    for i, name in enumerate(tails_on):
        on[0] = name
        a.slots.append(10 + i)
        w.forward([(a, 0, 3)] if i == 0 else [(a, 2 + i, 1)])
    on[0] = "A"
    before = pump.copies
    w.manager.end_step()
    others = sorted({n for n in tails_on if n != "A"})
    assert streams["A"].waited == others and streams["B"].waited == []
    assert pump.copies == before + (1 if others else 0)
    w.manager.end_step()  # nothing armed: no wait
    assert streams["A"].waited == others


class _KeptLaunches(ForwardGraphs):
    """Graphs whose "capture" keeps the launches of a phase's first use and whose replay runs them (a CPU's
    stand-in for the CUDA graphs: which phases hold a graph is what the test looks at)."""

    def __init__(self, *, rows_capacity: int, tokens_capacity: int) -> None:
        super().__init__(rows_capacity=rows_capacity, tokens_capacity=tokens_capacity, capture=False, strict=True)
        self._kept: dict[tuple[str, Bucket], Callable[[], None]] = {}

    def run(self, phase: str, bucket: Bucket, launches: Callable[[], None]) -> None:
        kept = self._kept.get((phase, bucket))
        if kept is None:
            launches()
            self._kept[(phase, bucket)] = launches
        else:
            kept()

    def drop(self, phase: str) -> None:
        self._kept = {k: v for k, v in self._kept.items() if k[0] != phase}


def test_turning_the_fold_off_drops_the_tail_graphs_with_the_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    w, eager = make_world(config=_config()), make_world(config=_config())
    caps = w.manager.capacities
    runner = w.manager._forwards[0]
    g = runner.graphs = _KeptLaunches(rows_capacity=caps.write_req_capacity,
                                      tokens_capacity=caps.write_token_capacity)
    a, b = Req(1, list(range(100, 130)), [1, 2, 3]), Req(1, list(range(100, 130)), [1, 2, 3])
    for world, r in ((w, a), (eager, b)):
        world.forward([(r, 0, 3)])
        world.manager.end_step()
        r.slots.append(4)
        world.forward([(r, 3, 1)])
        world.manager.end_step()
    assert {p for p, _ in g._kept} == {"head", "tail/0", "tail/1"} and runner._tail_runs
    with monkeypatch.context() as m:
        m.setattr(w.manager, "_on_cuda", True)
        m.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: True)
        w.manager._count(w.manager._tail_ids)
    assert {p for p, _ in g._kept} == {"head"} and runner._tail_runs == {} and runner.readback is None
    for world, r in ((w, a), (eager, b)):
        r.slots.append(5)
        world.forward([(r, 4, 1)])
        world.manager.end_step()
    assert {p for p, _ in g._kept} == {"head", "tail"}
    w.manager.flush()
    eager.manager.flush()
    assert differences(device_buffers(w.manager), device_buffers(eager.manager)) == []


def test_a_read_during_the_step_copies_again_and_the_step_end_too() -> None:
    w = make_world(config=_config())
    pad_eagerly(w.manager)
    a = Req(1, list(range(100, 130)), [1, 2, 3])
    w.forward([(a, 0, 3)])
    pump = w.manager._pump
    before = pump.copies
    w.manager.flush(during_step=True)  # after the TAIL's copy: the drain copies itself
    assert pump.copies == before + 1
    w.manager.end_step()  # the drain used the TAIL's buffer: the step's end copies into the other
    assert pump.copies == before + 2
    assert w.manager.flush() == []


def _transfer_steps(*, padded: bool) -> list[tuple[int, int | None, int | None, int]]:
    """A transfer verified between a forward's TAIL and the step's end (slots never written: violations now),
    then three step ends: per step (stats.step, snapshot.step, snapshot.write_index, violations)."""
    w = make_world(config=_config())
    if padded:
        pad_eagerly(w.manager)
    tv = TransferVerifier(w.manager, 16)
    a = Req(1, list(range(100, 130)), [1, 2, 3])
    w.forward([(a, 0, 3)])
    w.manager.end_step()
    a.slots.append(4)
    w.forward([(a, 3, 1)])  # a bucketed TAIL queues the read-back copy (padded)
    tv.verify([7, 8], first_position=0)
    out = []
    for _ in range(3):
        st, snap = w.manager.end_step(), w.manager.last_snapshot
        out.append((st.step, None if snap is None else snap.step, None if snap is None else snap.write_index,
                    st.violations))
    return out


def test_a_transfer_verified_after_a_bucketed_tail_is_in_that_steps_snapshot() -> None:
    """The verifier launches on the manager's endpoints after the TAIL's read-back copy: the step's end copies
    again (``CanaryManager.state_launched``), so the step's snapshot holds the transfer's rows, as eagerly."""
    eager, padded = _transfer_steps(padded=False), _transfer_steps(padded=True)
    assert eager[1][2] and eager[1][3]  # the rows are in step 1's snapshot
    assert padded == eager


def test_state_launched_makes_the_step_end_copy() -> None:
    w = make_world(config=_config())
    pad_eagerly(w.manager)
    a = Req(1, list(range(100, 130)), [1, 2, 3])
    w.forward([(a, 0, 3)])
    pump = w.manager._pump
    before = pump.copies
    w.manager.state_launched()
    w.manager.end_step()
    assert pump.copies == before + 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("sweep", [0, 3], ids=["no-sweep", "sweep-every-3"])
def test_tail_graphs_with_the_readback_copy_equal_eager_steps(sweep: int) -> None:
    """On a GPU with real graphs: the TAIL graphs (one per pump buffer) end with the read-back memcpy node; every
    step's stats and snapshot equal the eager manager's, and a step's end copies only after a sweep."""
    graphed = make_world(config=dataclasses.replace(_config(sweep=sweep), graphs=True), device="cuda")
    eager = make_world(config=dataclasses.replace(_config(sweep=sweep), graphs=False), device="cuda")
    g_steps, e_steps = _run(graphed), _run(eager)
    g = graphed.manager.graphs[0]
    assert g is not None and g.enabled and g.replays > 0
    assert {"tail/0", "tail/1"} <= {phase for phase, _ in g._graphs}
    _compare(g_steps, e_steps)
    assert sum(c for _, _, c in g_steps) == graphed.manager.sweep_passes  # only a sweep after the TAIL copies
    graphed.manager.flush()
    eager.manager.flush()
    torch.cuda.synchronize()
    assert differences(device_buffers(graphed.manager), device_buffers(eager.manager)) == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_step_ending_on_another_stream_than_its_tail_copies() -> None:
    """The event must follow the copy: a TAIL on one stream and the step's end on another make the end copy."""
    w = make_world(config=dataclasses.replace(_config(), graphs=True), device="cuda")
    a = Req(1, list(range(100, 130)), [1, 2, 3])
    pump = w.manager._pump
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    for n in range(4):
        a.slots.append(20 + n)
        same = n % 2 == 0
        with torch.cuda.stream(side):
            side.wait_stream(torch.cuda.default_stream())
            w.forward([(a, 0, 3)] if n == 0 else [(a, 2 + n, 1)])
            if same:
                before = pump.copies
                w.manager.end_step()
                assert pump.copies == before  # the TAIL's copy, on this stream
        if not same:
            torch.cuda.default_stream().wait_stream(side)
            before = pump.copies
            w.manager.end_step()
            assert pump.copies == before + 1
    torch.cuda.synchronize()
    assert w.events() == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_tail_on_a_busy_side_stream_is_in_its_steps_snapshot_without_a_join() -> None:
    """The forwards run on a side stream kept busy between HEAD and TAIL, and the step ends on the default stream
    without the test joining the two: the step's end waits for the side stream, so each step's snapshot (read a
    step later) holds its TAIL's work, as the same steps run on one stream."""
    graphed = make_world(config=dataclasses.replace(_config(), graphs=True), device="cuda")
    eager = make_world(config=dataclasses.replace(_config(), graphs=False), device="cuda")
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    busy, scratch = torch.zeros(4096, 4096, device="cuda"), torch.zeros(4096, 4096, device="cuda")
    steps: dict[int, list[tuple[StepStats, HostSnapshot | None]]] = {0: [], 1: []}
    for i, w in enumerate((graphed, eager)):
        a = Req(1, list(range(100, 130)), [1, 2, 3])
        w.forward([(a, 0, 3)])
        w.manager.end_step()
        for n in range(6):
            a.slots.append(20 + n)
            batch = w.build([(a, 3 + n, 1)])
            w.write_kv([20 + n])
            if n == 3:
                w.k[2, 0, 0] += 1.0  # a stray write into a live slot's K bytes: the TAIL's verify records it
            if w is graphed:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    w.manager.prepare(batch)
                    w.manager.head(batch)
                    for _ in range(40):
                        torch.mm(busy, busy, out=scratch)  # queued work: the TAIL runs long after end_step
                    w.manager.tail()
            else:
                with w.manager.forward(batch):
                    pass
            steps[i].append((w.manager.end_step(), w.manager.last_snapshot))
    torch.cuda.synchronize()
    assert steps[0] == steps[1]
    assert any(s.violations for s, _ in steps[1])
    assert graphed.manager._pump._armed_on == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_an_engine_capturing_the_managers_launches_turns_the_fold_off() -> None:
    """An engine that captures the manager's launches into its own graph replays them unseen, possibly after a
    bucketed TAIL of the same step: from its capture on, every step's end copies itself."""
    w = make_world(config=dataclasses.replace(_config(), graphs=True), device="cuda")
    a = Req(1, list(range(100, 130)), list(range(1, 11)))
    pump = w.manager._pump
    w.forward([(a, 0, 10)])
    w.manager.end_step()
    a.slots.append(20)
    batch = w.forward([(a, 10, 1)])
    before = pump.copies
    w.manager.end_step()
    assert pump.copies == before  # folded into the TAIL
    engine_graph = torch.cuda.CUDAGraph()
    w.manager.prepare(batch)
    with torch.cuda.graph(engine_graph):
        w.manager.head(batch)
        w.manager.tail()
    assert w.manager._forwards[0].readback is None
    a.slots.append(21)
    w.forward([(a, 11, 1)])  # a bucketed forward, then the engine's replay in the same step
    engine_graph.replay()
    before = pump.copies
    w.manager.end_step()
    assert pump.copies == before + 1

"""V's endpoints on a second branch under capture, on the CPU: which launches go on the branch and where it joins
(a recording branch stands in for the streams), and the read-back that puts K's rows before V's again (hand-made
rows, the pump, and whole managers whose "branch" runs V before K)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np
import pytest
import torch

from kvcanary.consts import VIOLATION_FIELDS, CanaryLaunchTag, RealKvHashMode
from kvcanary.manager import CanaryConfig, VerifyBudget
from kvcanary.manager.branch import FORK_BACKENDS, VBranch, forkable_backend, split_halves
from kvcanary.manager.forward import ForwardRunner
from kvcanary.manager.launch_order import in_launch_order
from kvcanary.manager.pump import SnapshotPump
from kvcanary.manager.state import CanaryDeviceState
from tests.manager.graph_parity import device_buffers, differences
from tests.manager.test_rotation import layered_world
from tests.manager.world import Req, World, make_world

T = CanaryLaunchTag


def _rows(tags: list[int]) -> np.ndarray:
    """Hand-made ring rows: the tag, then the row's place as its slot (what shows where each row went)."""
    out = np.zeros((len(tags), VIOLATION_FIELDS), dtype=np.int64)
    out[:, 0] = tags
    out[:, 1] = np.arange(len(tags))
    return out


def _order(tags: list[int], pairs: set[int]) -> list[int] | None:
    """The new places of ``tags``' rows (their slots, in read-back order), or None when nothing moved (the rows
    given come back themselves, nothing copied)."""
    given = _rows(tags)
    got = in_launch_order(given, pairs)
    return None if got is given else got[:, 1].tolist()


def test_a_phase_whose_k_and_v_rows_interleave_comes_back_k_first_each_half_in_ring_order() -> None:
    k, v = int(T.HEAD_K_FULL), int(T.HEAD_V_FULL)
    assert _order([v, k, v, k, k], {0}) == [1, 3, 4, 0, 2]


def test_two_forwards_phases_stay_in_forward_order_when_a_tail_run_separates_them() -> None:
    hk, hv, tk, tv = (int(t) for t in (T.HEAD_K_FULL, T.HEAD_V_FULL, T.TAIL_K_FULL, T.TAIL_V_FULL))
    assert _order([hv, hk, tv, tk, hv, hk], {0, 1}) == [1, 0, 3, 2, 5, 4]
    assert _order([hk, hv, tv, tk, hk, hv], {0, 1}) == [0, 1, 3, 2, 4, 5]


def test_rows_of_the_two_pools_sort_within_their_own_runs() -> None:
    fk, fv, sk, sv = (int(t) for t in (T.HEAD_K_FULL, T.HEAD_V_FULL, T.HEAD_K_SWA, T.HEAD_V_SWA))
    assert _order([fv, fk, sv, sk, sv], {0, 3}) == [1, 0, 3, 2, 4]
    assert _order([sv, fk, sk], {0, 3}) is None  # no run of one pair has V before K


def test_nothing_else_moves() -> None:
    sk, sv = int(T.SWEEP_K_FULL), int(T.SWEEP_V_FULL)
    tk, tv, hk, hv = int(T.TAIL_K_FULL), int(T.TAIL_V_FULL), int(T.HEAD_K_FULL), int(T.HEAD_V_FULL)
    assert _order([sv, sk, sv, sk], {0, 1}) is None  # the sweep is never forked: its ring order stands
    assert _order([tv, tk, hv, hk], {0}) == [0, 1, 3, 2]  # TAIL never forked here: only HEAD's run moves
    assert _order([hv, hk], set()) is None  # nothing forked: the ring's order
    assert _order([hk, hk, hv], {0}) is None  # in order already: nothing copied
    assert _order([hv], {0}) is None
    assert _order([99, 98, -1, -2], {0, 1}) is None  # tags no launch has: left where they are
    raw = _rows([hv, hk])
    before = raw.copy()
    assert in_launch_order(raw, {0}) is not raw
    assert np.array_equal(raw, before)  # the rows given are not touched


def test_one_phase_of_two_launches_with_no_row_between_sorts_as_one_run() -> None:
    # what the read-back cannot tell apart: two forwards' HEAD rows with no row of another phase between them
    # in one read are one run (documented in docs/graphs.md)
    hk, hv = int(T.HEAD_K_FULL), int(T.HEAD_V_FULL)
    assert _order([hk, hv, hk, hv], {0}) == [0, 2, 1, 3]


def test_the_pump_sorts_each_reads_new_rows_only_and_leaves_the_ring_as_it_is() -> None:
    state = CanaryDeviceState.allocate(ring_capacity=16, device=torch.device("cpu"), expected_pool_shape=None, packed=True)
    pump = SnapshotPump(state)
    hk, hv = int(T.HEAD_K_FULL), int(T.HEAD_V_FULL)
    ring, index = state.log.violation_ring, state.log.violation_write_index

    def append(tags: list[int], first_slot: int) -> None:
        n = int(index.reshape(-1)[0])
        for i, t in enumerate(tags):
            ring[n + i, 0], ring[n + i, 1] = t, first_slot + i
        index.add_(len(tags))

    append([hv, hk], 10)
    assert [r[1] for r in pump.drain(0).rows] == [10, 11]  # nothing forked yet: the ring's order
    pump.forked_pairs.add(0)
    append([hv, hk], 20)
    # the earlier read's rows stay as they were read; the new ones alone are put in launch order (not merged
    # into the earlier read's run, which a sort of every row would do)
    assert [r[1] for r in pump.drain(1).rows] == [10, 11, 21, 20]
    assert ring[:4, 1].tolist() == [10, 11, 20, 21]  # the ring's raw rows are unchanged
    append([hk], 30)
    assert [r[1] for r in pump.drain(2).rows] == [10, 11, 21, 20, 30]


def test_the_branch_holds_the_v_endpoints_and_only_atomic_backends_fork() -> None:
    w = make_world()
    head = w.manager._forwards[0].plans[0].head
    main, side = split_halves(head)
    assert [e.tag for e in main] == [T.HEAD_K_FULL] and [e.tag for e in side] == [T.HEAD_V_FULL]
    assert split_halves(head[:1]) == (head[:1], ())
    assert "torch_ref" not in FORK_BACKENDS
    assert not forkable_backend(torch.device("cpu"), "torch_ref")
    assert not forkable_backend(torch.device("cpu"), "no_such_backend")
    assert w.manager.branch is None and w.manager._forwards[0].branch is None  # a CPU manager never forks


class RecordingBranch(VBranch):
    """A branch for the CPU: always "capturing", any backend forks; the "side stream" runs first (V before K:
    the order a real fork may give) and every launch is logged with the stream it went to."""

    def __init__(self, log: list[str]) -> None:
        super().__init__(torch.device("cpu"), set())
        self.log = log
        self.on_side = False

    def capturing(self) -> bool:
        return True

    def usable(self, backend: str | None) -> bool:
        return True

    def launch(self, main: Callable[[], None], side: Callable[[], None]) -> None:
        self.log.append("fork")
        self.on_side = True
        side()
        self.on_side = False
        main()
        self.log.append("join")


def _record(runner: ForwardRunner, branch: RecordingBranch, log: list[str]) -> None:
    """Log every launch group of ``runner`` (instance attributes over its methods), with the stream of each
    endpoint's verify and write."""
    def wrap(name: str, label: Callable[..., str]) -> None:
        impl = getattr(runner, name)

        def run(*args: object) -> None:
            log.append(label(*args))
            impl(*args)
        setattr(runner, name, run)

    def where() -> str:
        return "side" if branch.on_side else "main"

    wrap("_claim", lambda *a: "claim")
    wrap("_plan", lambda gi, *a: f"plan{gi}")
    wrap("_filter", lambda gi, *a: f"filter{gi}")
    wrap("_count_skipped", lambda gi, *a: f"count{gi}")
    wrap("_rotate", lambda gi, *a: f"rotate{gi}")
    wrap("_verify_one", lambda gi, ep: f"{where()}:verify:{ep.tag.name}")
    wrap("_write_one", lambda gi, ep, v: f"{where()}:write:{ep.tag.name}")


def _forked(w: World) -> tuple[list[str], RecordingBranch]:
    log: list[str] = []
    branch = RecordingBranch(log)
    branch.pairs = w.manager._pump.forked_pairs
    runner = w.manager._forwards[0]
    runner.branch = branch
    _record(runner, branch, log)
    return log, branch


def _launches(tags: list[CanaryLaunchTag], where: str) -> list[str]:
    return [f"{where}:{op}:{t.name}" for t in tags for op in ("verify", "write")]


def test_the_fork_comes_after_the_plan_and_count_and_joins_before_the_next_group_and_the_rotation() -> None:
    w = make_world(swa_window=4)
    log, branch = _forked(w)
    a = Req(1, list(range(100, 130)), list(range(1, 5)))
    w.forward([(a, 0, 4)])
    head = ["claim"] + [
        x for gi, (k, v) in enumerate([(T.HEAD_K_FULL, T.HEAD_V_FULL), (T.HEAD_K_SWA, T.HEAD_V_SWA)])
        for x in [f"plan{gi}", f"count{gi}", "fork", *_launches([v], "side"), *_launches([k], "main"), "join"]]
    tail = [x for gi, (k, v) in enumerate([(T.TAIL_K_FULL, T.TAIL_V_FULL), (T.TAIL_K_SWA, T.TAIL_V_SWA)])
            for x in ["fork", *_launches([v], "side"), *_launches([k], "main"), "join", f"rotate{gi}"]]
    assert log == head + tail
    assert branch.forks == 4 and branch.pairs == {0, 1, 3, 4}


def test_a_budget_filters_before_the_fork() -> None:
    cfg = CanaryConfig(real_kv_mode=RealKvHashMode.PARTIAL, enable_v=True,
                       verify_budget=VerifyBudget(max_entries=4, newest_per_request=1))
    w = make_world(config=cfg)
    log, _ = _forked(w)
    a = Req(1, list(range(100, 130)), list(range(1, 5)))
    w.forward([(a, 0, 4)])
    assert log[: log.index("join") + 1] == ["claim", "plan0", "filter0", "fork", *_launches([T.HEAD_V_FULL], "side"),
                                            *_launches([T.HEAD_K_FULL], "main"), "join"]


def test_a_group_with_a_rotation_forks_its_head_only() -> None:
    w = layered_world(2, 2)
    log, branch = _forked(w)
    a = Req(1, list(range(100, 130)), list(range(1, 5)))
    w.forward([(a, 0, 4)])
    tail = log[log.index("join") + 1 :]
    assert tail == [*_launches([T.TAIL_K_FULL, T.TAIL_V_FULL], "main"), "rotate0"]
    assert branch.pairs == {0}


def test_a_k_only_group_never_forks() -> None:
    w = make_world(enable_v=False)
    log, branch = _forked(w)
    a = Req(1, list(range(100, 130)), list(range(1, 5)))
    w.forward([(a, 0, 4)])
    assert "fork" not in log and branch.forks == 0 and not branch.pairs


def _faulty(w: World) -> list[tuple[int, ...]]:
    """Two requests prefilled, then K and V canary records and K and V bytes of live slots corrupted (HEAD and
    TAIL rows of both halves), six decodes; every violation row as read back, in order."""
    a = Req(1, list(range(100, 130)), list(range(1, 11)))
    c = Req(3, list(range(500, 530)), list(range(40, 44)))
    w.forward([(a, 0, 10), (c, 0, 4)])
    w.step()
    g = w.manager.groups[0]
    assert g.v_head is not None
    g.k_head[3].view(torch.uint8)[0] ^= 0x20
    g.v_head[4].view(torch.uint8)[0] ^= 0x20
    g.v_head[41].view(torch.uint8)[0] ^= 0x20
    w.k[5, 0, 0] += 1.0
    w.v[7, 0, 0] += 1.0
    w.v[42, 0, 0] += 1.0
    for n in range(6):
        a.slots.append(20 + n)
        c.slots.append(50 + n)
        w.forward([(a, 10 + n, 1), (c, 4 + n, 1)])
        w.step()
    w.manager.flush()
    return [(e.violation.kernel_kind, e.violation.slot_idx, e.violation.position, e.violation.fail_reason_bits)
            for e in w.manager.events]


@pytest.mark.parametrize("variant", ["full", "budget", "swa"])
def test_a_forked_manager_reports_the_rows_of_one_in_turn_in_the_same_order(variant: str) -> None:
    def world() -> World:
        if variant == "swa":
            return make_world(swa_window=4)
        if variant == "budget":
            return make_world(config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL, enable_v=True,
                                                  verify_budget=VerifyBudget(max_entries=8, newest_per_request=1)))
        return make_world()
    in_turn = world()
    want = _faulty(in_turn)
    forked = world()
    _forked(forked)
    got = _faulty(forked)
    tags = [r[0] for r in want]
    assert {T.HEAD_K_FULL, T.HEAD_V_FULL, T.TAIL_K_FULL, T.TAIL_V_FULL} <= set(tags), "both halves must report"
    assert got == want
    ring = forked.manager.state.log.violation_ring[: len(want), 0].tolist()
    assert ring != tags, "the recording branch runs V first: the ring's raw order must differ"
    assert differences(device_buffers(forked.manager), device_buffers(in_turn.manager), ring_as_multiset=True) == []



class _Stream:
    """A stand-in for a CUDA stream on the CPU: logs each wait (``a<-b``: stream a waits for stream b)."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    def wait_stream(self, other: _Stream) -> None:
        self.log.append(f"{self.name}<-{other.name}")


@pytest.mark.parametrize("raising", ["side", "main"])
def test_a_launch_that_raises_under_the_fork_still_joins(raising: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # an error in V's launches (a V source's contract check, a V kernel compiled under capture) or K's must
    # leave the capture joined, as launching in turn did: an unjoined side stream makes the capture's end fail
    # with a CUDA error in place of the launch's own
    log: list[str] = []
    current, side = _Stream("current", log), _Stream("side", log)
    branch = VBranch(torch.device("cpu"), set())
    branch.stream = side  # type: ignore[assignment]
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())

    def fail(name: str) -> Callable[[], None]:
        def run() -> None:
            log.append(name)
            if name == raising:
                raise ValueError(f"kv-canary: bad {name} input")
        return run
    with pytest.raises(ValueError, match=f"bad {raising} input"):
        branch.launch(fail("main"), fail("side"))
    assert log[0] == "side<-current" and log[-1] == "current<-side", log
    assert branch.forks == 0 and not branch.pairs

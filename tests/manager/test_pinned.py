"""The manager's pinned host inputs: a map writes a step's rows and lengths with numpy, the HEAD copies them in.

Two host buffers alternate; a buffer is handed out again only once the step that last copied it is known
finished (the fence); a kept batch's staged HEAD runs the copy first (one unit per host buffer: what the staged
graph replays, a memcpy node from the pinned buffer); every device buffer and report ends as fresh batches
leave them, eager, bucketed and on a GPU with real graphs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from kvcanary.consts import RealKvHashMode
from kvcanary.manager import CanaryBatch, CanaryConfig
from kvcanary.manager.graphs import Bucket, ForwardGraphs
from kvcanary.manager.pinned import PinnedInputs
from tests.manager.graph_parity import device_buffers, differences, pad_eagerly
from tests.manager.world import Req, World, make_world


def _inputs(size: int = 8, *, fence: Callable[[int], None] | None = None, step: list[int] | None = None,
            device: str = "cpu") -> PinnedInputs:
    at = step if step is not None else [0]
    return PinnedInputs(size, torch.device(device), fence=fence, current_step=lambda: at[0])


def test_host_buffers_alternate_and_a_commit_is_copied_once() -> None:
    p = _inputs()
    a = p.host()
    a[:3] = [7, 8, 9]
    p.commit(3)
    assert p.pending == 3
    p.flush()
    assert p.device[:3].tolist() == [7, 8, 9] and p.pending == 0
    p.flush()  # nothing pending: nothing copied
    b = p.host()
    assert not np.shares_memory(a, b)
    b[:2] = [1, 2]
    p.commit(2)
    k, n = p.take()
    assert n == 2 and p.pending == 0 and p.device[:3].tolist() == [7, 8, 9]  # taken, not copied yet
    p.copy(k, n)()
    assert p.device[:3].tolist() == [1, 2, 9]
    assert np.shares_memory(p.host(), a)  # back to the first buffer


def test_an_uncopied_commit_is_dropped_by_the_next_step() -> None:
    p = _inputs()
    p.host()[:1] = [5]
    p.commit(1)
    p.host()[:1] = [6]  # the step was abandoned before its HEAD: its commit is gone
    assert p.pending == 0
    p.flush()
    assert p.device[0].item() == 0


def test_a_buffer_is_fenced_on_the_step_that_last_copied_it() -> None:
    asked: list[int] = []
    step = [0]
    p = _inputs(fence=asked.append, step=step)
    for s in range(4):
        step[0] = s
        p.host()[:1] = [s]
        p.commit(1)
        p.flush()
    # steps 0 and 1 used the two buffers first (never copied before: no fence); 2 and 3 reuse them
    assert asked == [0, 1] and p.fenced == 2
    p.host()
    assert asked == [0, 1, 2]
    p.host()
    assert asked == [0, 1, 2, 3]
    p.host()
    assert asked == [0, 1, 2, 3]  # this buffer's last hand-out committed nothing: nothing to wait for


def test_bad_sizes_name_the_argument() -> None:
    with pytest.raises(ValueError, match="size >= 1"):
        _inputs(0)
    p = _inputs(4)
    p.host()
    with pytest.raises(ValueError, match=r"commit\(n\) needs 0 <= n <= 4"):
        p.commit(5)
    w = make_world(config=_config())
    w.manager.pinned_inputs(16)
    assert w.manager.pinned_inputs(8) is w.manager.pinned_inputs(16)
    with pytest.raises(ValueError, match="pinned_inputs\\(size=32\\)"):
        w.manager.pinned_inputs(32)


def test_the_pump_knows_a_step_finished_once_it_read_it() -> None:
    w = make_world(config=_config())
    pump = w.manager._pump
    assert pump._finished == -1
    w.step()
    w.step()
    assert pump._finished == 0  # step 0's copy was read at step 1's end
    pump.wait_through(0)  # covered: returns at once
    w.manager.flush()
    assert pump._finished == 1  # a read after step 1 ended
    w.manager.flush(during_step=True)
    assert pump._finished == 1  # a read during step 2: not known finished


def _config(*, verify_token: bool = False) -> CanaryConfig:
    return CanaryConfig(real_kv_mode=RealKvHashMode.ALL, enable_v=True, enable_verify_token=verify_token,
                        health_warmup_steps=2, health_every=1)


class _Pinned:
    """Makes ``w.build`` hand a batch whose rows, prefix and extend lengths are views of the manager's pinned
    inputs (written with numpy, committed, copied by the HEAD), and the same batch object again, its other tensors
    refilled in place, while the shapes hold (what the transformers map does)."""

    def __init__(self, w: World) -> None:
        self.pinned = w.manager.pinned_inputs(3 * w.manager.capacities.write_req_capacity)
        self.kept: CanaryBatch | None = None
        self.reused = 0
        self._build = w.build
        w.build = self.build  # type: ignore[method-assign]

    @staticmethod
    def _refilled(b: CanaryBatch) -> list[torch.Tensor]:
        assert b.expected_tokens is not None
        return [b.input_ids, b.positions, b.out_cache_loc, b.expected_tokens.flat, b.expected_tokens.lens]

    def build(self, *a: Any, **k: Any) -> CanaryBatch:
        fresh = self._build(*a, **k)
        bs = fresh.batch_size
        host = self.pinned.host()
        host[: 3 * bs] = torch.cat([fresh.req_pool_indices, fresh.prefix_lens, fresh.extend_lens]).cpu().numpy()
        self.pinned.commit(3 * bs)
        kept = self.kept
        if kept is not None and kept.batch_size == bs and \
                [t.shape for t in self._refilled(kept)] == [t.shape for t in self._refilled(fresh)]:
            for dst, src in zip(self._refilled(kept), self._refilled(fresh), strict=True):
                dst.copy_(src)
            self.reused += 1
            return kept
        dev = self.pinned.device
        self.kept = dataclasses.replace(fresh, req_pool_indices=dev[:bs], prefix_lens=dev[bs : 2 * bs],
                                        extend_lens=dev[2 * bs : 3 * bs])
        return self.kept


class _Phases(ForwardGraphs):
    """The padded launches run eagerly every time (no capture), each run's phase recorded."""

    def __init__(self, *, rows_capacity: int, tokens_capacity: int) -> None:
        super().__init__(rows_capacity=rows_capacity, tokens_capacity=tokens_capacity, capture=False, strict=True)
        self.runs: list[str] = []

    def run(self, phase: str, bucket: Bucket, launches: Callable[[], None]) -> None:
        self.runs.append(phase)
        super().run(phase, bucket, launches)


def _decodes(worlds: list[World], *, flip_at: int | None = 5, steps: int = 8) -> list[tuple[Req, Req]]:
    """Two requests prefilled, then ``steps`` decodes of both (one batch shape), a K byte of a live slot flipped
    at ``flip_at``, then a decode of one."""
    reqs = [(Req(1, list(range(100, 130)), [1, 2, 3]), Req(2, list(range(200, 230)), [4, 5])) for _ in worlds]
    for w, (a, b) in zip(worlds, reqs, strict=True):
        w.forward([(a, 0, 3), (b, 0, 2)])
        w.step()
    for n in range(steps):
        for w, (a, b) in zip(worlds, reqs, strict=True):
            a.slots.append(20 + n)
            b.slots.append(30 + n)
            if n == flip_at:
                w.k[2, 0, 0] += 1.0  # a stray write into a live slot's K bytes (a prompt slot of a)
            w.forward([(a, 3 + n, 1), (b, 2 + n, 1)])
            w.step()
    for w, (a, _) in zip(worlds, reqs, strict=True):
        a.slots.append(40)
        w.forward([(a, 3 + steps, 1)])
        w.step()
    return reqs


def _same(w: World, fresh: World) -> None:
    w.manager.flush()
    fresh.manager.flush()
    assert fresh.manager.events, "the flip must show"
    assert differences(device_buffers(w.manager), device_buffers(fresh.manager)) == []
    assert [e.violation for e in w.manager.events] == [e.violation for e in fresh.manager.events]
    assert w.manager.health.issued == fresh.manager.health.issued


@pytest.mark.parametrize("verify_token", [False, True], ids=["plain", "verify-token"])
@pytest.mark.parametrize("padded", [False, True], ids=["eager", "bucketed"])
def test_a_map_through_pinned_inputs_leaves_every_buffer_as_fresh_batches_do(padded: bool,
                                                                            verify_token: bool) -> None:
    w, fresh = make_world(config=_config(verify_token=verify_token)), make_world(config=_config(
        verify_token=verify_token))
    if padded:
        pad_eagerly(w.manager)
        pad_eagerly(fresh.manager)
    pinned = _Pinned(w)
    _decodes([w, fresh])
    assert pinned.reused == 7 and pinned.pinned.pending == 0
    _same(w, fresh)


def test_a_kept_batch_runs_the_pinned_copy_inside_its_staged_head_one_unit_per_host_buffer() -> None:
    """From the staged HEAD on, the copy runs inside it: one staged unit per host buffer (what two graphs replay,
    alternating); with the expected-token scatter on, ``prepare`` copies first and the staged unit has no copy."""
    for verify_token in (False, True):
        w, fresh = make_world(config=_config(verify_token=verify_token)), make_world(config=_config(
            verify_token=verify_token))
        caps = w.manager.capacities
        g = w.manager._forwards[0].graphs = _Phases(rows_capacity=caps.write_req_capacity,
                                                    tokens_capacity=caps.write_token_capacity)
        pad_eagerly(fresh.manager)
        _Pinned(w)
        _decodes([w, fresh])
        heads = [r for r in g.runs if not r.startswith("tail")]
        # the prefill, the first decode and its first reuse, then the staged unit (the decode of one: a new batch)
        if verify_token:
            assert heads == ["head", "head", "head"] + ["head_staged"] * 6 + ["head"]
        else:
            assert heads == ["head", "head", "head"] + ["head_staged/1/6", "head_staged/0/6"] * 3 + ["head"]
        _same(w, fresh)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_staged_graph_copying_from_pinned_inputs_equals_fresh_eager_batches() -> None:
    """On a GPU, with real graphs: the kept batch's HEAD replays one of two staged graphs whose first node copies
    the step's rows from the pinned buffer the host just wrote (never the other one); every buffer and report
    ends as fresh batches run eagerly leave them, and the host never had to wait for a buffer on the way."""
    graphed = make_world(config=dataclasses.replace(_config(), graphs=True), device="cuda")
    fresh = make_world(config=dataclasses.replace(_config(), graphs=False), device="cuda")
    pinned = _Pinned(graphed)
    _decodes([graphed, fresh], steps=12)
    g = graphed.manager.graphs[0]
    assert g is not None and g.enabled
    # HEAD and TAIL of the two buckets, and the kept batch's two staged HEAD graphs (one per host buffer)
    assert g.captures >= 6 and g.replays >= 2 * 8
    assert pinned.reused == 11 and pinned.pinned.pending == 0
    _same(graphed, fresh)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_double_buffering_never_tears_with_a_slow_queue() -> None:
    """The host writes step after step while the device is kept busy behind each copy: every copy reads the
    values the host wrote for its step, never the next step's (each buffer is handed out again only once the
    fence says its last copy ran)."""
    dev = torch.device("cuda")
    w = make_world(config=_config(), device="cuda")
    p = w.manager.pinned_inputs(1 << 16)
    out = torch.zeros(20, 1 << 16, dtype=torch.int64, device=dev)
    busy = torch.zeros(4096, 4096, device=dev)
    for s in range(20):
        host = p.host()
        host[:] = s
        p.commit(1 << 16)
        for _ in range(4):
            busy.mul_(1.0001)  # device work queued ahead of the copy: the copy runs long after the host moved on
        p.flush()
        out[s].copy_(p.device)
        w.manager.end_step()
    torch.cuda.synchronize()
    assert (out == torch.arange(20, device=dev)[:, None]).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_pinned_copy_inside_an_engine_capture_is_refused() -> None:
    p = _inputs(device="cuda")
    p.host()[:2] = [3, 4]
    p.commit(2)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="while a CUDA graph is being captured"), torch.cuda.graph(graph):
        p.flush()
    assert p.pending == 2  # nothing taken: the step's copy is still to come
    p.flush()
    assert p.device[:2].tolist() == [3, 4]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_fence_waits_for_a_step_it_has_not_read() -> None:
    """A buffer handed out again within the step that copied it waits for the stream; once that step ended (its
    read-back pending, not read yet) it asks the read-back's event. Every copy reads what the host wrote for it."""
    dev = torch.device("cuda")
    w = make_world(config=_config(), device="cuda")
    n = 1 << 16
    p = w.manager.pinned_inputs(n)
    pump = w.manager._pump
    asked: list[int] = []
    queries = list(pump._query)

    def counted(k: int) -> Callable[[], bool]:
        def query() -> bool:
            asked.append(k)
            return bool(queries[k]())
        return query

    pump._query = [counted(k) for k in range(len(queries))]
    out = torch.zeros(4, n, dtype=torch.int64, device=dev)
    busy = torch.zeros(4096, 4096, device=dev)
    for i in range(4):
        if i == 3:
            w.manager.end_step()  # step 0 ends: its read-back pending, not read
            assert asked == []
        host = p.host()
        host[:] = i
        p.commit(n)
        for _ in range(4):
            busy.mul_(1.0001)
        p.flush()
        out[i].copy_(p.device)
    assert pump._pending is not None and asked == [pump._pending[1]]  # step 0's read-back event, once
    torch.cuda.synchronize()
    assert (out == torch.arange(4, device=dev)[:, None]).all()

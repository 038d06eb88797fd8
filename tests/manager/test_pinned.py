"""The manager's pinned host inputs: a map writes a step's rows and lengths with numpy, the HEAD copies them in.

Each forward of a step has its own host buffer per step parity; a buffer is handed out again only once the step
that last copied it is known finished (the fence, which in the steady state needs no CUDA call); a kept batch's staged HEAD runs the copy first (one unit per host buffer: what the staged
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
from kvcanary.manager.forward import STAGED_LENGTHS
from kvcanary.manager.pinned import FORWARDS_PER_STEP, PinnedInputs
from tests.manager.graph_parity import PhaseLog, pad_eagerly
from tests.manager.reused_batches import ReusedBatches, same_as_fresh
from tests.manager.world import Req, World, make_world


def _inputs(size: int = 8, *, fence: Callable[[int], None] | None = None, step: list[int] | None = None,
            device: str = "cpu") -> PinnedInputs:
    at = step if step is not None else [0]
    return PinnedInputs(size, torch.device(device), fence=fence, current_step=lambda: at[0])


def test_host_buffers_alternate_and_a_commit_is_copied_once() -> None:
    step = [0]
    p = _inputs(step=step)
    a = p.host()
    a[:3] = [7, 8, 9]
    p.commit(3)
    assert p.pending == 3
    p.flush()
    assert p.device[:3].tolist() == [7, 8, 9] and p.pending == 0
    p.flush()  # nothing pending: nothing copied
    step[0] = 1
    b = p.host()
    assert not np.shares_memory(a, b)
    b[:2] = [1, 2]
    p.commit(2)
    k, n = p.take()
    assert n == 2 and p.pending == 0 and p.device[:3].tolist() == [7, 8, 9]  # taken, not copied yet
    p.copy(k, n)()
    assert p.device[:3].tolist() == [1, 2, 9]
    step[0] = 2
    assert np.shares_memory(p.host(), a)  # back to the first buffer, two steps later


def test_each_forward_of_a_step_has_its_own_buffer_per_step_parity() -> None:
    """The step's n-th forward writes buffer ``2 n + step % 2``: a buffer comes back two steps later, never
    within the step (up to FORWARDS_PER_STEP forwards; a further one reuses the step's first buffer)."""
    step = [0]
    p = _inputs(step=step)
    got: list[list[int]] = []
    for s in range(4):
        step[0] = s
        got.append([])
        for _ in range(FORWARDS_PER_STEP + 1):
            p.host()
            got[-1].append(p.index)
    per_step = [2 * f for f in range(FORWARDS_PER_STEP)]
    assert got[0] == got[2] == [*per_step, 0]
    assert got[1] == got[3] == [k + 1 for k in per_step] + [1]
    assert len(p._host) == 2 * FORWARDS_PER_STEP  # made when first needed, bounded


def test_an_uncopied_commit_is_dropped_by_the_next_step() -> None:
    p = _inputs()
    p.host()[:1] = [5]
    p.commit(1)
    p.host()[:1] = [6]  # the forward was abandoned before its HEAD: its commit is gone
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
    assert asked == [0, 1] and p.fenced == 2 and p.waits == {"None": 2}
    p.host()  # step 3's second forward: a buffer of its own, never copied
    assert asked == [0, 1]
    for _ in range(FORWARDS_PER_STEP - 1):
        p.host()  # the step's fifth forward reuses the step's first buffer: fenced on step 3
    assert asked == [0, 1, 3]
    step[0] = 5
    p.host()
    assert asked == [0, 1, 3]  # this buffer's last hand-out committed nothing: nothing to wait for


def _forwards_per_step(per_step: int, steps: int = 6) -> PinnedInputs:
    """``per_step`` bucketed forwards of one slot per step, each through the pinned inputs, the pump's
    ``wait_through`` as the fence (what the manager gives on a GPU)."""
    w = make_world(config=_config())
    pad_eagerly(w.manager)
    p = w.manager.pinned_inputs(64)
    p._fence = w.manager._pump.wait_through
    a = Req(1, list(range(100, 130)), [1, 2, 3])
    w.forward([(a, 0, 3)])
    w.step()
    for n in range(steps):
        a.slots.append(10 + n)
        for _ in range(per_step):
            host = p.host()
            host[:3] = [1, 3 + n, 1]
            p.commit(3)
            b = dataclasses.replace(w.build([(a, 3 + n, 1)]), req_pool_indices=p.device[:1],
                                    prefix_lens=p.device[1:2], extend_lens=p.device[2:3])
            with w.manager.forward(b):
                w.write_kv(b.out_cache_loc.tolist())
        w.step()
    assert w.manager.flush() == []
    return p


@pytest.mark.parametrize("per_step", [1, 2, 3])
def test_forwards_of_a_step_reuse_buffers_without_asking_the_device(per_step: int) -> None:
    """In the steady state every buffer handed out again was copied two steps before, which the read-back has
    already seen finished: the fence answers from what was read (no event query, no stream wait)."""
    p = _forwards_per_step(per_step)
    assert p.waits == {"read": p.fenced} and p.fenced == 6 * per_step - 2 * per_step


def test_asking_for_a_host_buffer_during_a_capture_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _inputs()
    p._non_blocking = True  # as on a CUDA device
    monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: True)
    with pytest.raises(RuntimeError, match=r"\(host\(\)\) while a CUDA graph is being captured.*pinned_inputs\(\)"):
        p.host()
    assert p.fenced == 0 and p.pending == 0


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
    assert pump.wait_through(0) == "read"  # covered: returns at once
    assert pump.wait_through(1) == "sync"  # not read, but a CPU device has no queue
    w.manager.flush()
    assert pump._finished == 1  # a read after step 1 ended
    w.manager.flush(during_step=True)
    assert pump._finished == 1  # a read during step 2: not known finished


def _config(*, verify_token: bool = False) -> CanaryConfig:
    return CanaryConfig(real_kv_mode=RealKvHashMode.ALL, enable_v=True, enable_verify_token=verify_token,
                        health_warmup_steps=2, health_every=1)


class _Pinned(ReusedBatches):
    """Makes ``w.build`` hand a batch whose rows, prefix and extend lengths are views of the manager's pinned
    inputs (written with numpy, committed, copied by the HEAD), and the same batch object again, its other tensors
    refilled in place, while the shapes hold (what the transformers map does)."""

    def __init__(self, w: World) -> None:
        self.pinned = w.manager.pinned_inputs(3 * w.manager.capacities.write_req_capacity)
        super().__init__(w)

    @staticmethod
    def refilled(b: CanaryBatch) -> list[torch.Tensor]:
        assert b.expected_tokens is not None
        return [b.input_ids, b.positions, b.out_cache_loc, b.expected_tokens.flat, b.expected_tokens.lens]

    def keep(self, fresh: CanaryBatch) -> CanaryBatch:
        bs = fresh.batch_size
        dev = self.pinned.device
        return dataclasses.replace(fresh, req_pool_indices=dev[:bs], prefix_lens=dev[bs : 2 * bs],
                                   extend_lens=dev[2 * bs : 3 * bs])

    def build(self, *a: Any, **k: Any) -> CanaryBatch:
        fresh = self._build(*a, **k)
        bs = fresh.batch_size
        host = self.pinned.host()
        host[: 3 * bs] = torch.cat([fresh.req_pool_indices, fresh.prefix_lens, fresh.extend_lens]).cpu().numpy()
        self.pinned.commit(3 * bs)
        return self.reuse(fresh)


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
    same_as_fresh(w, fresh)


def test_a_kept_batch_runs_the_pinned_copy_inside_its_staged_head_one_unit_per_host_buffer() -> None:
    """From the staged HEAD on, the copy runs inside it: one staged unit per host buffer (what two graphs replay,
    alternating); with the expected-token scatter on, ``prepare`` copies first and the staged unit has no copy."""
    for verify_token in (False, True):
        w, fresh = make_world(config=_config(verify_token=verify_token)), make_world(config=_config(
            verify_token=verify_token))
        caps = w.manager.capacities
        g = w.manager._forwards[0].graphs = PhaseLog(rows_capacity=caps.write_req_capacity,
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
        same_as_fresh(w, fresh)


class _Lengths(_Pinned):
    """Commits a different length each forward (six in turn; the values past the batch's rows are unused)."""

    def __init__(self, w: World) -> None:
        super().__init__(w)
        self.n = 0

    def build(self, *a: Any, **k: Any) -> CanaryBatch:
        batch = super().build(*a, **k)
        self.pinned.commit(3 * batch.batch_size + self.n % 6)
        self.n += 1
        return batch


def test_a_kept_batch_holds_staged_graphs_for_a_few_committed_lengths_only() -> None:
    """Past STAGED_LENGTHS committed lengths the copy is issued eagerly before the plain staged HEAD: the kept
    batch's staged graphs stay bounded, and every buffer ends as fresh batches leave it."""
    w, fresh = make_world(config=_config()), make_world(config=_config())
    caps = w.manager.capacities
    g = w.manager._forwards[0].graphs = PhaseLog(rows_capacity=caps.write_req_capacity,
                                                tokens_capacity=caps.write_token_capacity)
    pad_eagerly(fresh.manager)
    _Lengths(w)
    _decodes([w, fresh], steps=14)
    staged = [r for r in g.runs if r.startswith("head_staged")]
    lengths = {int(r.split("/")[2]) for r in staged if r.count("/") == 2}
    assert len(lengths) == STAGED_LENGTHS and "head_staged" in staged  # the other lengths: the plain staged HEAD
    assert len(w.manager._forwards[0]._staged_runs) <= 2 * STAGED_LENGTHS
    same_as_fresh(w, fresh)


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
    same_as_fresh(graphed, fresh)


def _slow_copies(w: World, rounds: int, *, end_every: int) -> torch.Tensor:
    """``rounds`` forwards' inputs written on the host (round ``i``: every value ``i``), each copy queued behind
    device work (it runs long after the host moved on) and saved on the device; the step ends after every
    ``end_every`` rounds (0: never)."""
    dev = torch.device("cuda")
    n = 1 << 16
    p = w.manager.pinned_inputs(n)
    out = torch.zeros(rounds, n, dtype=torch.int64, device=dev)
    busy = torch.zeros(4096, 4096, device=dev)
    for i in range(rounds):
        host = p.host()
        host[:] = i
        p.commit(n)
        for _ in range(4):
            busy.mul_(1.0001)
        p.flush()
        out[i].copy_(p.device)
        if end_every and (i + 1) % end_every == 0:
            w.manager.end_step()
    torch.cuda.synchronize()
    return out


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_buffers_handed_out_again_within_a_step_never_tear_with_a_slow_queue() -> None:
    """No step end: the step's forwards wrap around its buffers, and a buffer comes back while its copy is still
    queued behind the device's work. The fence waits for the stream (asserted), so every copy reads the values
    the host wrote for it, never a later forward's."""
    w = make_world(config=_config(), device="cuda")
    out = _slow_copies(w, 20, end_every=0)
    p = w.manager._forwards[0].pinned
    assert p is not None and p.waits == {"stream": 20 - FORWARDS_PER_STEP}
    assert (out == torch.arange(20, device=out.device)[:, None]).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_two_forwards_a_step_never_tear_and_never_wait() -> None:
    """Two forwards per step, each copy behind device work: a buffer comes back two steps later, which the
    read-back has seen finished (the fence answers from the read, asserted), and no copy reads a later value."""
    # steps without forwards: the kernel-run watchdog would rightly say the canary is not running
    w = make_world(config=dataclasses.replace(_config(), health_warmup_steps=1 << 20), device="cuda")
    out = _slow_copies(w, 20, end_every=2)
    p = w.manager._forwards[0].pinned
    assert p is not None and p.waits == {"read": 20 - 4}
    assert (out == torch.arange(20, device=out.device)[:, None]).all()


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
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match=r"\(host\(\)\) while a CUDA graph.*pinned_inputs\(\)"), \
            torch.cuda.graph(graph):
        p.host()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_pump_says_how_it_knew_a_step_finished() -> None:
    """``wait_through``: a step already read needs no CUDA call; an ended step whose read-back is pending asks that
    read-back's event; a step in progress waits for the stream."""
    w = make_world(config=_config(), device="cuda")
    pump = w.manager._pump
    w.manager.end_step()  # step 0 ends: its read-back pending, not read
    assert pump.wait_through(0) == "event"
    assert pump.wait_through(1) == "stream"  # step 1 is in progress
    w.manager.end_step()  # step 1 ends: step 0's read-back read
    assert pump.wait_through(0) == "read"

"""The read-back: the device state is one buffer in the pump's layout, so a snapshot is one copy, and it reads
what the separate buffers of the unpacked state (the compiled manager's) read."""

from __future__ import annotations

import random

import pytest
import torch

from kvcanary.consts import NUM_LAUNCH_TAGS, VIOLATION_FIELDS
from kvcanary.manager.pump import SnapshotPump
from kvcanary.manager.state import CanaryDeviceState

_DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


def _state(packed: bool, device: str = "cpu") -> CanaryDeviceState:
    return CanaryDeviceState.allocate(ring_capacity=8, device=torch.device(device), expected_pool_shape=None,
                                      packed=packed)


def _fill(st: CanaryDeviceState, rng: random.Random, rows: int) -> None:
    """What the kernels do: bump the int32 write index, the counters, the overflow count, fill ring rows."""
    st.log.violation_write_index.add_(rows)
    for t in range(NUM_LAUNCH_TAGS):
        st.kernel_run_counters[t : t + 1].add_(rng.randrange(0, 1000))
        st.slot_run_counters[t : t + 1].add_(rng.randrange(0, 10**6))
    st.skipped_verifies.add_(rng.randrange(0, 3))
    done = int(st.log.violation_write_index[0]) - rows
    for i in range(done, min(done + rows, 8)):
        st.log.violation_ring[i] = torch.tensor([rng.randrange(-(2**62), 2**62) for _ in range(VIOLATION_FIELDS)])


def test_packed_state_is_views_of_one_buffer() -> None:
    st = _state(True)
    assert st.packed is not None
    base = st.packed.untyped_storage().data_ptr()
    for t in (st.log.violation_ring, st.log.violation_write_index, st.kernel_run_counters, st.slot_run_counters,
              st.skipped_verifies):
        assert t.untyped_storage().data_ptr() == base and t.is_contiguous()
    assert st.log.violation_write_index.dtype == torch.int32 and st.log.violation_ring.dtype == torch.int64
    assert _state(False).packed is None


@pytest.mark.parametrize("device", _DEVICES)
def test_packed_and_separate_states_read_back_the_same_snapshots(device: str) -> None:
    """On a GPU too: there the copy is asynchronous, into pinned memory, read a step later."""
    rng_a, rng_b = random.Random(7), random.Random(7)
    a, b = _state(True, device), _state(False, device)
    pa, pb = SnapshotPump(a), SnapshotPump(b)
    seen = 0
    for step in range(12):
        n = rng_a.randrange(0, 3)
        assert n == rng_b.randrange(0, 3)
        _fill(a, rng_a, n)
        _fill(b, rng_b, n)
        sa, sb = pa.step(step), pb.step(step)
        assert sa == sb
        if sa is not None:
            seen += len(sa.rows)
            assert sa.write_index == int(b.log.violation_write_index[0]) - n  # the previous step's state
    final_a, final_b = pa.drain(12), pb.drain(12)
    assert final_a == final_b and final_a.write_index > 8 and len(final_a.rows) == 8 and seen
    assert final_a.kernel_run_counters == tuple(b.kernel_run_counters.tolist())
    assert final_a.skipped_verifies == int(b.skipped_verifies[0])


def _ring_rows(st: CanaryDeviceState) -> tuple[tuple[int, ...], ...]:
    n = min(int(st.log.violation_write_index[0]), st.log.ring_capacity)
    return tuple(tuple(r) for r in st.log.violation_ring[:n].tolist())


@pytest.mark.parametrize("device", _DEVICES)
def test_rows_follow_the_copy_when_a_kept_row_changes(device: str) -> None:
    """The pump reuses the rows it decoded before only while their copied bytes are the same: a row rewritten in
    place, or a ring that shrank (a fresh log), is decoded again from the copy."""
    st = _state(True, device)
    pump = SnapshotPump(st)
    rng = random.Random(3)
    _fill(st, rng, 3)
    pump.drain(0)
    first = pump.drain(1)
    assert first.rows == _ring_rows(st) and len(first.rows) == 3
    st.log.violation_ring[1, 4] += 1  # same count, one field changed
    assert pump.drain(2).rows == _ring_rows(st) != first.rows
    _fill(st, rng, 2)  # two more rows after the kept ones
    grown = pump.drain(3)
    assert grown.rows == _ring_rows(st) and len(grown.rows) == 5
    st.log.violation_ring[0, 0] -= 7  # an old row changed while new ones arrive
    _fill(st, rng, 1)
    assert pump.drain(4).rows == _ring_rows(st)
    st.log.violation_ring.zero_()
    st.log.violation_write_index.zero_()
    assert pump.drain(5).rows == ()
    for step in range(6, 9):  # the lagged path: each snapshot is the state as the previous step left it
        before = _ring_rows(st)
        _fill(st, rng, 1)
        snap = pump.step(step)
        assert snap is None or snap.rows == before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_event_follows_the_stream_the_copy_ran_on() -> None:
    """The engine may switch streams between steps: the copy's event is recorded on the stream it ran on, so the
    read a step later waits for that stream's work, not the default stream's. Each stream's object is made once."""
    st = _state(True, "cuda")
    pump = SnapshotPump(st)
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    pump.advance(0)
    for step in range(1, 4):
        with torch.cuda.stream(side):
            side.wait_stream(torch.cuda.default_stream())
            torch.cuda._sleep(50_000_000)  # type: ignore[no-untyped-call]  # the copy below queues behind this
            st.log.violation_write_index.add_(1)
            assert pump._current_stream() == side and pump._current_stream() is pump._current_stream()
            pump.advance(step)
        # the copy just started on ``side`` is still queued behind the sleep: reading it must wait for it
        torch.cuda.default_stream().wait_stream(side)
        head = pump.advance(step + 100)
        assert head is not None and head[0] == step
        pump.drain(step + 200)
    assert len(pump._streams) == 2  # the side stream and the default one, each made once

"""The device→host pump: one asynchronous copy per step, read one step later.

At the end of each step the write index, the ring, both per-tag counter arrays and the overflow counter
are packed (device-to-device, in stream order, so the snapshot is consistent: one copy, since the manager's
state is one buffer in this layout) into one of two device staging buffers; a side stream then copies that
buffer into pinned host memory and records an event. The host reads the copy started at the previous step,
long finished by then. The GPU never waits for the host; the compute stream only waits (on the device) for
the side copy of two steps ago before reusing its staging buffer. :meth:`SnapshotPump.drain` is the one
synchronous read (end of run, tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.consts import NUM_LAUNCH_TAGS, VIOLATION_FIELDS
from kvcanary.manager.state import CanaryDeviceState


@dataclass(frozen=True)
class HostSnapshot:
    """What the device state held at the end of step ``step``."""

    step: int
    write_index: int
    rows: tuple[tuple[int, ...], ...]
    kernel_run_counters: tuple[int, ...]
    slot_run_counters: tuple[int, ...]
    skipped_verifies: int


_N = NUM_LAUNCH_TAGS


class SnapshotPump:
    """Double-buffered D2H of the manager's device state. Packed layout (int64):
    ``[write_index, kernel_run_counters[12], slot_run_counters[12], skipped, ring[cap * 8]]``."""

    def __init__(self, state: CanaryDeviceState) -> None:
        self._state = state
        dev = state.log.violation_ring.device
        self._cap = state.log.ring_capacity
        size = 2 + 2 * _N + self._cap * VIOLATION_FIELDS
        self._cuda = dev.type == "cuda"
        self._stage = [torch.zeros(size, dtype=torch.int64, device=dev) for _ in range(2)]
        self._host = ([torch.zeros(size, dtype=torch.int64, pin_memory=True) for _ in range(2)]
                      if self._cuda else self._stage)
        self._stream = torch.cuda.Stream(dev) if self._cuda else None  # type: ignore[no-untyped-call]
        self._done: list[torch.cuda.Event | None] = [None, None]
        self._pending: tuple[int, int] | None = None  # (step, buffer index)
        self._next = 0

    def step(self, step: int) -> HostSnapshot | None:
        """Start the copy for ``step``; return the snapshot started by the previous call (None at first)."""
        prev = self._pending
        self._pending = (step, self._start())
        return self._read(*prev) if prev is not None else None

    def drain(self, step: int) -> HostSnapshot:
        """Copy now and wait for it: the current state as of ``step``, no lag (discards the pending one)."""
        self._pending = None
        return self._read(step, self._start())

    def _start(self) -> int:
        k = self._next
        self._next ^= 1
        st, stage = self._state, self._stage[k]
        if self._stream is not None:
            done = self._done[k]
            if done is not None:  # the side copy of two steps ago must have left this staging buffer
                torch.cuda.current_stream(stage.device).wait_event(done)
        if st.packed is not None:  # the state is one buffer in this layout: one device copy
            stage.copy_(st.packed)
        else:
            stage[0:1].copy_(st.log.violation_write_index)
            stage[1 : 1 + _N].copy_(st.kernel_run_counters)
            stage[1 + _N : 1 + 2 * _N].copy_(st.slot_run_counters)
            stage[1 + 2 * _N : 2 + 2 * _N].copy_(st.skipped_verifies)
            stage[2 + 2 * _N :].copy_(st.log.violation_ring.view(-1))
        if self._stream is not None:
            packed = torch.cuda.Event()  # type: ignore[no-untyped-call]
            packed.record(torch.cuda.current_stream(stage.device))
            with torch.cuda.stream(self._stream):
                self._stream.wait_event(packed)
                self._host[k].copy_(stage, non_blocking=True)
                done = torch.cuda.Event()  # type: ignore[no-untyped-call]
                done.record(self._stream)
            self._done[k] = done
        return k

    def _read(self, step: int, k: int) -> HostSnapshot:
        done = self._done[k]
        if done is not None:
            done.synchronize()
        host = self._host[k]
        base = 2 + 2 * _N
        v = host[:base].tolist()
        total = int(v[0])
        nrows = min(total, self._cap)
        flat = host[base : base + nrows * VIOLATION_FIELDS].view(nrows, VIOLATION_FIELDS).tolist()
        rows = tuple(tuple(r) for r in flat)
        return HostSnapshot(step, total, rows, tuple(v[1 : 1 + _N]), tuple(v[1 + _N : 1 + 2 * _N]), int(v[1 + 2 * _N]))

"""The device→host pump: one asynchronous copy per step, read one step later.

At the end of each step the write index, both per-tag counter arrays, the overflow counter and the ring
(one int64 buffer in the manager's packed layout) are copied, in stream order after the step's launches, into
one of two pinned host buffers, and an event (made once per buffer) is recorded behind the copy. The host reads
the copy started at the previous step, long finished by then, and decodes it with numpy on the host copy: the
header in one list, and only the ring rows that the previous read did not already hold (rows once written
stay; they are compared, not trusted; with no row at all there is nothing to compare), K's rows of a phase
captured with V on a second stream put before V's again (:mod:`kvcanary.manager.launch_order`). The GPU never
waits for the host; a step's host work is one copy and one event record (the unpacked state of the compiled manager: one
copy per buffer, five) and the header read: the :class:`HostSnapshot` is made only when asked for (the manager
asks when the header shows something new, or the watchdog is due). :meth:`SnapshotPump.drain` is the one
synchronous read (end of run, tests).

With the manager's graphs, the copy is folded into the step's TAIL graph (a memcpy node at its end, one TAIL
graph per host buffer: :meth:`SnapshotPump.tail_copy`): when nothing was launched between that TAIL and the step's
end (no sweep, no other forward), the step's end records the event and issues no copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kvcanary.consts import NUM_LAUNCH_TAGS, VIOLATION_FIELDS
from kvcanary.manager.launch_order import in_launch_order
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
_BASE = 2 + 2 * _N
HEADER_SKIPPED = 1 + 2 * _N
"""Index of the overflow (skipped verifies) count in :attr:`SnapshotPump.header`."""


class SnapshotPump:
    """Double-buffered D2H of the manager's device state. Packed layout (int64):
    ``[write_index, kernel_run_counters[12], slot_run_counters[12], skipped, ring[cap * 8]]``."""

    def __init__(self, state: CanaryDeviceState) -> None:
        self._state = state
        dev = state.log.violation_ring.device
        self._cap = state.log.ring_capacity
        size = _BASE + self._cap * VIOLATION_FIELDS
        self._cuda = dev.type == "cuda"
        self._dev_index = dev.index  # an int (or None: the current device) is the cheap form of current_stream's
        self._host = [torch.zeros(size, dtype=torch.int64, pin_memory=self._cuda) for _ in range(2)]
        self._np = [h.numpy() for h in self._host]
        st = state
        self._parts = None if st.packed is not None else [
            [(h[0:1], st.log.violation_write_index), (h[1 : 1 + _N], st.kernel_run_counters),
             (h[1 + _N : 1 + 2 * _N], st.slot_run_counters), (h[1 + 2 * _N : _BASE], st.skipped_verifies),
             (h[_BASE:], st.log.violation_ring.view(-1))] for h in self._host]
        self._done = ([torch.cuda.Event() for _ in range(2)]  # type: ignore[no-untyped-call]
                      if self._cuda else None)
        # each event's own record / query / synchronize, bound once (the C methods under torch's wrappers, which
        # add a Python frame per call and nothing else for a given stream)
        self._record = [super(torch.cuda.Event, e).record for e in self._done or ()]
        self._query = [super(torch.cuda.Event, e).query for e in self._done or ()]
        self._wait = [super(torch.cuda.Event, e).synchronize for e in self._done or ()]
        self._streams: dict[tuple[int, int, int], torch.cuda.Stream] = {}
        """The device's streams the copies ran on, by torch's stream triple (one object per stream, made once)."""
        self._head = [n.data.cast("B").cast("q")[:_BASE] for n in self._np]
        """The header part of each host buffer, an int64 memoryview made once: its ``tolist`` is the same ints as
        numpy's, without numpy's conversion code, which the step's end finds cold after the forward."""
        self._pending: tuple[int, int] | None = None  # (step, buffer index)
        self._tail_copies: list[Callable[[], None] | None] = [None, None]  # per host buffer (:meth:`tail_copy`)
        self._armed = -1  # the host buffer the last TAIL copied into, nothing launched since (-1: none)
        self._armed_on: list[torch.cuda.Stream] = []
        """Every stream a TAIL copied on since the last copy started (:meth:`arm`; empty: none, or not CUDA)."""
        self.copies = 0
        """Read-back copies issued by the pump itself (a step whose TAIL copied for it issues none)."""
        self.next_index = 0
        """The host buffer the next copy fills (what a TAIL graph that copies for the pump must copy into): read
        by every bucketed TAIL, a plain attribute (not a property's frame)."""
        self.forked_pairs: set[int] = set()
        """The launch-tag pairs (``K tag // 2``) of the phases ever captured with V on a second stream (filled by
        the manager's :class:`~kvcanary.manager.branch.VBranch`): each read's new rows of these pairs are put in
        launch order (:func:`~kvcanary.manager.launch_order.in_launch_order`). Empty: the ring's order."""
        self.rows: tuple[tuple[int, ...], ...] = ()
        """The ring rows of the last read, decoded (kept from read to read while their bytes are unchanged), each
        read's new rows in launch order (:attr:`forked_pairs`); the ring's own rows stay as they are."""
        self._rows_raw = np.zeros((0, VIOLATION_FIELDS), dtype=np.int64)  # the same rows, as copied
        self.header: list[int] | None = None
        """The last read's header as ints, in the packed layout's order (``[write_index, kernel_run_counters,
        slot_run_counters, skipped]``; :data:`HEADER_SKIPPED` indexes the last), or None before any read."""
        self.read_step = -1
        """The step whose copy the last read was (-1 before any)."""
        self._finished = -1
        """The last step whose work the device is known to have finished (a read behind that step's end)."""
        self._snap: HostSnapshot | None = None  # the last read as a snapshot, once asked for

    def step(self, step: int) -> HostSnapshot | None:
        """Start the copy for ``step``; return the snapshot started by the previous call (None at first)."""
        return self.last() if self.advance(step) is not None else None

    def advance(self, step: int) -> list[int] | None:
        """Start the copy for ``step`` and read the one the previous call started: its header (see
        :attr:`header`; None at first), the ring rows decoded only where they changed. The snapshot object is
        built only when asked for (:meth:`snapshot`): the usual step reads a header and nothing else."""
        prev = self._pending
        self._pending = (step, self._start())
        if prev is None:
            return None
        head = self._read(*prev)
        self._finished = max(self._finished, prev[0])
        return head

    def drain(self, step: int, *, ended: bool = False) -> HostSnapshot:
        """Copy now and wait for it: the current state as of ``step``, no lag (discards the pending one, once
        its copy is done: the next step writes its buffer again). ``ended``: ``step`` has ended (no more of its
        work comes), so the device is known to have finished it."""
        if self._pending is not None and self._done is not None:
            self._done[self._pending[1]].synchronize()
        self._pending = None
        self._read(step, self._start(force=True))
        # what was queued so far is done; unless ``ended``, ``step`` may be in progress (a read during it)
        self._finished = max(self._finished, step if ended else step - 1)
        return self.last()

    def wait_through(self, step: int) -> str:
        """Return once the device finished the work queued on the copies' stream up to the end of ``step``, and
        say how that was known: ``"read"``, at once, when a read already covered it (the usual case, no CUDA
        call); ``"sync"``, at once, on a device without a queue (the work ran when issued); ``"event"``, the
        query of the copy recorded at that step's end (a wait only when it is still queued); ``"stream"``, a
        wait for the stream (the step has not ended). What :class:`~kvcanary.manager.pinned.PinnedInputs` asks
        before it rewrites a host buffer."""
        if step <= self._finished:
            return "read"
        if self._done is None:
            return "sync"
        pend = self._pending
        if pend is not None and pend[0] >= step:
            k = pend[1]
            if not self._query[k]():
                self._wait[k]()
            return "event"
        self._current_stream().synchronize()
        return "stream"

    def snapshot(self) -> HostSnapshot | None:
        """The last read as a :class:`HostSnapshot` (made once per read, when first asked for)."""
        snap = self._snap
        if snap is None and self.header is not None:
            v = self.header
            snap = self._snap = HostSnapshot(self.read_step, v[0], self.rows, tuple(v[1 : 1 + _N]),
                                             tuple(v[1 + _N : 1 + 2 * _N]), v[HEADER_SKIPPED])
        return snap

    def last(self) -> HostSnapshot:
        """:meth:`snapshot`, after at least one read (``RuntimeError`` before any)."""
        snap = self.snapshot()
        if snap is None:
            raise RuntimeError("kv-canary: no read-back yet (the pump's first copy is read at the next step)")
        return snap

    def tail_copy(self, k: int) -> Callable[[], None] | None:
        """The read-back copy into host buffer ``k``, for the end of a TAIL graph (a memcpy node: the packed state
        to a pinned buffer at a fixed address); made once per buffer. None with the unpacked state (one copy per
        buffer: not folded)."""
        if self._state.packed is None:
            return None
        run = self._tail_copies[k]
        if run is None:
            src, dst, nb = self._state.packed, self._host[k], self._cuda

            def run() -> None:
                dst.copy_(src, non_blocking=nb)
            self._tail_copies[k] = run
        return run

    def arm(self, k: int) -> None:
        """A TAIL just queued the copy into host buffer ``k`` (:meth:`tail_copy`) behind its launches: the next
        step's end only records the event, unless something is launched before it (:meth:`disarm`) or a TAIL of
        the step ran on another stream than the step's end (which then waits for each such stream and copies:
        no TAIL's copy may land in the buffer after the event the host waits for)."""
        self._armed = k
        if self._record:
            stream = self._current_stream()
            if stream not in self._armed_on:
                self._armed_on.append(stream)

    def disarm(self) -> None:
        """Something that changes the device state was launched since the TAIL's copy: the step's end copies
        (still after the TAILs' copies, on every stream they ran on)."""
        self._armed = -1

    def _start(self, *, force: bool = False) -> int:
        k = self.next_index
        self.next_index ^= 1
        armed, self._armed = self._armed, -1
        stream = self._current_stream() if self._record else None
        joined = False  # whether a TAIL's copy ran on another stream: this copy and the event follow it
        if self._armed_on:
            assert stream is not None
            for other in self._armed_on:
                if other is not stream:
                    stream.wait_stream(other)
                    joined = True
            self._armed_on.clear()
        # the buffer's previous copy was read by the host a step ago (or waited for by drain): free to write
        if armed == k and not force and not joined:
            pass  # the step's TAILs copied the state into this buffer, on this stream, and nothing came since
        elif self._parts is None:
            self.copies += 1
            self._host[k].copy_(self._state.packed, non_blocking=self._cuda)  # type: ignore[arg-type]
        else:  # the unpacked state (the compiled manager's): one copy per buffer, in stream order
            self.copies += 1
            for dst, src in self._parts[k]:
                dst.copy_(src, non_blocking=self._cuda)
        if stream is not None:  # behind the copy, on the stream it ran on (the state's device's current one)
            self._record[k](stream)
        return k

    def _current_stream(self) -> torch.cuda.Stream:
        """The state's device's current stream: ``torch.cuda.current_stream(index)`` without building a new Stream
        object at every step (the engine may switch streams between steps: each one gets its own, made once)."""
        idx = self._dev_index
        key: tuple[int, int, int] = torch._C._cuda_getCurrentStream(torch.cuda.current_device() if idx is None else idx)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = torch.cuda.Stream(  # type: ignore[no-untyped-call]
                stream_id=key[0], device_index=key[1], device_type=key[2])
        return stream

    def _read(self, step: int, k: int) -> list[int]:
        if self._query and not self._query[k]():  # a copy a step old is done: one query, no blocking wait
            self._wait[k]()
        host = self._np[k]
        v: list[int] = self._head[k].tolist()
        nrows = min(v[0], self._cap)
        if nrows or self.rows:  # rows once decoded are kept while their copied bytes are unchanged
            self._decode(host[_BASE : _BASE + nrows * VIOLATION_FIELDS].reshape(nrows, VIOLATION_FIELDS))
        self.header, self.read_step, self._snap = v, step, None
        return v

    def _decode(self, raw: np.ndarray[Any, np.dtype[np.int64]]) -> None:
        """``raw`` as tuples of ints into :attr:`rows`: the rows the previous read decoded are reused while their
        copied bytes are unchanged (the usual case: a ring row is written once); only the new ones are
        converted."""
        have, prev = len(self.rows), self._rows_raw
        n = int(raw.shape[0])
        if n == have and (n == 0 or np.array_equal(raw, prev)):
            return
        if n > have and (have == 0 or np.array_equal(raw[:have], prev)):
            rows = self.rows + tuple(map(tuple, in_launch_order(raw[have:], self.forked_pairs).tolist()))
        else:
            rows = tuple(map(tuple, in_launch_order(raw, self.forked_pairs).tolist()))
        self.rows, self._rows_raw = rows, raw.copy()


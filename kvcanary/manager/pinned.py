"""Pinned host inputs of one forward slot: the engine's map writes a step's values with numpy, the manager copies.

A map that builds a forward's rows and lengths on the host used to write them into a pinned buffer and issue
the host-to-device copy itself: one CUDA call per step. :class:`PinnedInputs` moves that copy into the manager:
the map writes the step's values into :meth:`PinnedInputs.host` (no CUDA call), says how many with
:meth:`PinnedInputs.commit`, and the manager's HEAD issues the copy, inside the kept batch's staged HEAD graph
(a memcpy node reading the pinned buffer at its fixed address) or eagerly, before anything reads
:attr:`PinnedInputs.device`.

Each forward of a step writes its own host buffer, chosen by the step's parity and the forward's number in the
step (:data:`FORWARDS_PER_STEP` per parity, made when first needed), so a buffer is handed out again two steps
after its last use and the host never rewrites bytes a queued copy has not read yet. That is known without a
CUDA call in the usual step: the read-back pump reads step ``s`` at the end of step ``s + 1`` (after its
event). Otherwise (more forwards in a step than buffers, or no step end for a while) :attr:`fence` checks (an
event query, a wait only when the work is still queued).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

FORWARDS_PER_STEP = 4
"""Forwards per step (of one slot) with host buffers of their own: ``2 * FORWARDS_PER_STEP`` buffers at most; a
further forward in the same step reuses the step's first buffer (after the fence)."""

_CAPTURING = ("kv-canary: the pinned inputs were {what} while a CUDA graph is being captured (the graph would read "
              "one host buffer at every replay); an engine that captures its forward builds its batches from device "
              "tensors, not from pinned_inputs()")


def check_size(size: object) -> None:
    """A pinned inputs' ``size`` (int64 values per buffer) is an int >= 1: a TypeError (a bool or a float is no
    size) or a ValueError naming ``size`` otherwise."""
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"kv-canary: pinned inputs need an int size (int64 values per buffer), got "
                        f"{type(size).__name__} {size!r}")
    if size < 1:
        raise ValueError(f"kv-canary: pinned inputs need size >= 1, got {size}")


class PinnedInputs:
    """Pinned int64 host buffers (two per forward of a step, made when first used) and one device buffer of
    ``size`` values.

    ``fence(step)`` returns once the device has finished the work queued up to the end of ``step``, and may say
    how it knew (its result is counted in :attr:`waits`; None: no fence, the copies are synchronous: a CPU
    device); ``current_step()`` is the step a copy belongs to.
    """

    def __init__(self, size: int, device: torch.device, *, fence: Callable[[int], object] | None,
                 current_step: Callable[[], int]) -> None:
        check_size(size)
        cuda = device.type == "cuda"
        self.size = size
        self.device = torch.zeros(size, dtype=torch.int64, device=device)
        """What the batch's tensors view: valid once the manager's HEAD copied the committed values in."""
        self._pin = cuda
        self._host: list[torch.Tensor] = []
        self._np: list[np.ndarray[Any, np.dtype[np.int64]]] = []  # the same memory: the map writes it, no torch op
        self._used: list[int] = []
        """Per host buffer: the step whose forward last copied it (-1: never)."""
        self._fence = fence
        self._step = current_step
        self._host_step = -1  # the step of the last :meth:`host`
        self._nth = 0  # how many :meth:`host` calls that step made before the last one
        self.index = 0
        """The host buffer the current forward writes (what the last :meth:`host` returned)."""
        self.pending = 0
        """Values of the current host buffer committed and not yet copied (0: none)."""
        self._non_blocking = cuda
        self._copies: dict[tuple[int, int], Callable[[], None]] = {}
        """Per (host buffer, length): the copy (its two slices made once, not per step)."""
        self.fenced = 0
        """How many times :meth:`host` asked the fence (a buffer handed out again after a copy read it)."""
        self.waits: dict[str, int] = {}
        """What the fence answered, counted (the read-back pump's :meth:`~kvcanary.manager.pump.SnapshotPump.
        wait_through`: ``"read"`` when no CUDA call was needed, ``"event"`` or ``"stream"`` when it asked)."""
        self._buffer(1)  # the two buffers of one forward per step

    def _buffer(self, k: int) -> None:
        """Make host buffers up to ``k`` (a forward number the step reaches for the first time)."""
        while len(self._host) <= k:
            h = torch.zeros(self.size, dtype=torch.int64, pin_memory=self._pin)
            self._host.append(h)
            self._np.append(h.numpy())
            self._used.append(-1)

    def host(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """This forward's host buffer, free to write (numpy, the pinned memory itself): the step's ``n``-th call
        gets buffer ``2 * n + step % 2``, so a buffer comes back two steps later. A commit that no HEAD copied
        (a forward abandoned before its HEAD) is dropped. Refused while a CUDA graph is being captured on the
        current stream (the capture would freeze one buffer)."""
        if self._non_blocking and torch._C._cuda_isCurrentStreamCapturing():
            raise RuntimeError(_CAPTURING.format(what="asked for a host buffer (host())"))
        step = self._step()
        if step != self._host_step:
            self._host_step, self._nth = step, 0
        else:
            self._nth += 1
        k = 2 * (self._nth % FORWARDS_PER_STEP) + (step & 1)
        if k >= len(self._host):
            self._buffer(k)
        used = self._used[k]
        if used >= 0 and self._fence is not None:
            self.fenced += 1
            how = str(self._fence(used))
            self.waits[how] = self.waits.get(how, 0) + 1
            self._used[k] = -1
        self.index, self.pending = k, 0
        return self._np[k]

    def commit(self, n: int) -> None:
        """The current host buffer's first ``n`` values are the step's: the manager's next HEAD copies them.
        ``n`` is an int (a bool or a float is no count: one type test per step)."""
        if type(n) is not int and (isinstance(n, bool) or not isinstance(n, int)):
            raise TypeError(f"kv-canary: PinnedInputs.commit(n) needs an int n (values written), got "
                            f"{type(n).__name__} {n!r}")
        if not 0 <= n <= self.size:
            raise ValueError(f"kv-canary: commit(n) needs 0 <= n <= {self.size} (the pinned inputs' size), got {n}")
        self.pending = n

    def take(self) -> tuple[int, int]:
        """The committed copy, ``(host buffer, length)``, marked as issued (length 0: none pending)."""
        n = self.pending
        if n:
            self.pending = 0
            self._used[self.index] = self._step()
        return self.index, n

    def copy(self, k: int, n: int) -> Callable[[], None]:
        """The copy of host buffer ``k``'s first ``n`` values to :attr:`device` (capturable: a pinned source at a
        fixed address; made once per buffer and length)."""
        run = self._copies.get((k, n))
        if run is None:
            src, dst, nb = self._host[k][:n], self.device[:n], self._non_blocking

            def run() -> None:
                dst.copy_(src, non_blocking=nb)
            if len(self._copies) >= 64:
                self._copies.clear()
            self._copies[(k, n)] = run
        return run

    def flush(self) -> None:
        """Issue the committed copy now (eagerly, in stream order), if one is pending. Refused while a CUDA graph
        is being captured on the current stream (an engine capturing its forward with the manager's launches):
        that graph would read the same host buffer at every replay, while the host changes buffers."""
        if self.pending and self._non_blocking and torch._C._cuda_isCurrentStreamCapturing():
            raise RuntimeError(_CAPTURING.format(what="copied (their copy was issued)"))
        k, n = self.take()
        if n:
            self.copy(k, n)()

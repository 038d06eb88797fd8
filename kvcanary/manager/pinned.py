"""Pinned host inputs of one forward slot: the engine's map writes a step's values with numpy, the manager copies.

A map that builds a forward's rows and lengths on the host used to write them into a pinned buffer and issue
the host-to-device copy itself: one CUDA call per step. :class:`PinnedInputs` moves that copy into the manager:
the map writes the step's values into :meth:`PinnedInputs.host` (no CUDA call), says how many with
:meth:`PinnedInputs.commit`, and the manager's HEAD issues the copy, inside the kept batch's staged HEAD graph
(a memcpy node reading the pinned buffer at its fixed address) or eagerly, before anything reads
:attr:`PinnedInputs.device`.

Two pinned buffers alternate per step, so the host never rewrites bytes a queued copy has not read yet: a
buffer is handed out again only once the device finished the step that last copied it. That is known without a
CUDA call in the usual step: the read-back pump reads step ``s`` at the end of step ``s + 1`` (after its event),
and a buffer is handed out again two steps after its use. Otherwise :attr:`fence` checks (an event query, a wait
only when the work is still queued).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch


class PinnedInputs:
    """Two pinned int64 host buffers and one device buffer of ``size`` values.

    ``fence(step)`` returns once the device has finished the work queued up to the end of ``step`` (None: no
    fence, the copies are synchronous: a CPU device); ``current_step()`` is the step a copy belongs to.
    """

    def __init__(self, size: int, device: torch.device, *, fence: Callable[[int], None] | None,
                 current_step: Callable[[], int]) -> None:
        if size < 1:
            raise ValueError(f"kv-canary: pinned inputs need size >= 1, got {size}")
        cuda = device.type == "cuda"
        self.size = size
        self.device = torch.zeros(size, dtype=torch.int64, device=device)
        """What the batch's tensors view: valid once the manager's HEAD copied the committed values in."""
        self._host = [torch.zeros(size, dtype=torch.int64, pin_memory=cuda) for _ in range(2)]
        self._np = [h.numpy() for h in self._host]  # the same memory: the map writes it without torch ops
        self._fence = fence
        self._step = current_step
        self._used = [-1, -1]
        """Per host buffer: the step whose forward last copied it (-1: never)."""
        self.index = 1
        """The host buffer the current step writes (the next :meth:`host` takes the other one)."""
        self.pending = 0
        """Values of the current host buffer committed and not yet copied (0: none)."""
        self._non_blocking = cuda
        self._copies: dict[tuple[int, int], Callable[[], None]] = {}
        """Per (host buffer, length): the copy (its two slices made once, not per step)."""
        self.fenced = 0
        """How many times :meth:`host` asked the fence (a buffer handed out again after a copy read it)."""

    def host(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The next step's host buffer, free to write (numpy, the pinned memory itself). A commit that no HEAD
        copied (a step abandoned before its forward) is dropped."""
        k = self.index ^ 1
        used = self._used[k]
        if used >= 0 and self._fence is not None:
            self.fenced += 1
            self._fence(used)
            self._used[k] = -1
        self.index, self.pending = k, 0
        return self._np[k]

    def commit(self, n: int) -> None:
        """The current host buffer's first ``n`` values are the step's: the manager's next HEAD copies them."""
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
        that graph would read the same host buffer at every replay, while the host alternates."""
        if self.pending and self._non_blocking and torch._C._cuda_isCurrentStreamCapturing():
            raise RuntimeError("kv-canary: the pinned inputs' copy was issued while a CUDA graph is being captured "
                               "(the graph would read one host buffer at every replay); an engine that captures its "
                               "forward builds its batches from device tensors, not from pinned_inputs()")
        k, n = self.take()
        if n:
            self.copy(k, n)()

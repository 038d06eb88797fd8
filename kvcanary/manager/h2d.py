"""Host→device staging for the manager's eager inputs (expected-token snapshots, sweep entries).

Two pinned host buffers alternate; each H2D copy is asynchronous and records its buffer's event (made once),
and a buffer is only rewritten once the copy that last read it has completed (normally long before). So the
host never waits for the GPU's queue to drain, and a later write never races an in-flight copy.
"""

from __future__ import annotations

import torch


class HostStaging:
    """Pack int64 host tensors into a pinned buffer and copy them to a device buffer in one transfer."""

    def __init__(self, size: int, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._bufs = [torch.zeros(size, dtype=torch.int64, pin_memory=self._cuda) for _ in range(2)]
        self._np = [b.numpy() for b in self._bufs]  # the same memory, for packing host parts without torch ops
        self._events = ([torch.cuda.Event() for _ in range(2)]  # type: ignore[no-untyped-call]
                        if self._cuda else None)  # one per buffer, made once: recorded behind its copy
        self._dev_index = device.index  # current_stream's cheap argument (None: the current device)
        self._next = 0
        self.size = size

    def copy(self, dst: torch.Tensor, parts: list[torch.Tensor]) -> int:
        """``dst[:total] = concat(parts)``; returns ``total``. ``dst`` is an int64 device tensor; each part is
        flattened and cast to int64 (host parts are packed with numpy: the copy to ``dst`` is the one copy op)."""
        total = sum(int(p.numel()) for p in parts)
        if total > self.size or total > dst.numel():
            raise RuntimeError(f"kv-canary: host staging of {total} values exceeds its capacity {self.size}")
        k = self._next
        self._next ^= 1
        events = self._events
        if events is not None:  # the copy that last read this buffer (an event never recorded: no wait)
            events[k].synchronize()
        buf, host = self._bufs[k], self._np[k]
        at = 0
        for p in parts:
            n = int(p.numel())
            if p.device.type == "cpu":  # the usual host tensor: written with numpy, no copy op
                host[at : at + n] = p.numpy().reshape(-1)
            else:
                buf[at : at + n].copy_(p.reshape(-1))
            at += n
        dst[:total].copy_(buf[:total], non_blocking=self._cuda)
        if events is not None:
            events[k].record(torch.cuda.current_stream(self._dev_index))
        return total

"""PD disaggregation: a prefill engine computes a request's KV, which is copied into a decode engine's
pool together with its canary records (the records are content-only, so they stay valid at new slots).

The decode side verifies the transferred prefix with its first forward: HEAD checks the records, TAIL
checks the real-KV fingerprints against the bytes that actually arrived.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from kvcanary.demo.engine.faults import Fault, FaultInjector
from kvcanary.demo.engine.memory import KvMemory
from kvcanary.demo.engine.requests import ReqState, Request, RequestTable
from kvcanary.manager import CanaryManager


class PrefillPeer(Protocol):
    """What the decode side uses of its PD prefill engine."""

    @property
    def memory(self) -> KvMemory: ...

    @property
    def canary(self) -> CanaryManager | None: ...

    def submit(self, prompt: list[int], max_new_tokens: int, *, hold_for_transfer: bool = ...) -> Request: ...

    def step(self) -> object: ...

    def release_transferred(self, req: Request) -> None: ...


class RemotePuller(Protocol):
    """What the decode engine calls to prefill a request elsewhere and seat it with the transferred KV."""

    def pull(self, req: Request) -> None: ...


def _copy_rows(dst: torch.Tensor, dst_idx: list[int], src: torch.Tensor, src_idx: list[int]) -> None:
    if dst_idx:
        d = torch.tensor(dst_idx, dtype=torch.int64, device=dst.device)
        s = torch.tensor(src_idx, dtype=torch.int64, device=src.device)
        dst[d] = src[s].to(dst.device)


def copy_kv(dm: KvMemory, dst_slots: list[int], sm: KvMemory, src_slots: list[int], *, chunk: int,
            faults: FaultInjector) -> None:
    """Copy every layer's K/V of ``src_slots`` (full pool, and resident SWA slots) ``chunk`` tokens at a time."""
    n = len(src_slots)
    num_chunks = -(-n // chunk)
    if n % chunk and faults.fire(Fault.CORRUPTED_TRANSFER, f"transfer of {n} tokens dropped the last "
                                 f"{n % chunk} tokens' K/V"):
        num_chunks = n // chunk  # BUG: floor division drops the last partial chunk
    for c in range(num_chunks):
        a, b = c * chunk, min(n, (c + 1) * chunk)
        d, s = dst_slots[a:b], src_slots[a:b]
        for dk, sk in zip(dm.pool.k + dm.pool.v, sm.pool.k + sm.pool.v, strict=True):
            _copy_rows(dk, d, sk, s)
        if dm.swa is not None and sm.swa is not None:
            pairs = [(dm.swa.host_lut[x], sm.swa.host_lut[y]) for x, y in zip(d, s, strict=True)
                     if sm.swa.host_lut[y]]
            for dk, sk in zip(dm.swa.kv.k + dm.swa.kv.v, sm.swa.kv.k + sm.swa.kv.v, strict=True):
                _copy_rows(dk, [p[0] for p in pairs], sk, [p[1] for p in pairs])


def copy_canaries(dst: CanaryManager | None, dm: KvMemory, dst_slots: list[int], src: CanaryManager | None,
                  sm: KvMemory, src_slots: list[int]) -> None:
    """Carry every canary buffer's records along (FULL by full slot, SWA by SWA slot)."""
    if dst is None:
        return
    if src is None:
        raise RuntimeError("PD transfer: the decode engine runs the canary but the prefill engine does not; "
                           "its records cannot travel with the KV")
    src_bufs = dict(src.transfer_buffers())
    for name, buf in dst.transfer_buffers():
        if name.startswith("swa."):
            assert dm.swa is not None and sm.swa is not None
            pairs = [(dm.swa.host_lut[x], sm.swa.host_lut[y]) for x, y in zip(dst_slots, src_slots, strict=True)
                     if sm.swa.host_lut[y]]
            _copy_rows(buf, [p[0] for p in pairs], src_bufs[name], [p[1] for p in pairs])
        else:
            _copy_rows(buf, dst_slots, src_bufs[name], src_slots)


@dataclass(frozen=True)
class RemotePrefill:
    """The decode side of PD disaggregation for one engine: prefill on the peer, copy the KV and its canary
    records into this engine's pool (``chunk`` tokens at a time), and hand the request to this engine's
    table to decode."""

    peer: PrefillPeer
    memory: KvMemory
    requests: RequestTable
    canary: CanaryManager | None
    faults: FaultInjector
    chunk: int

    def pull(self, req: Request) -> None:
        """Prefill ``req`` on the peer, then move its KV and canaries here; ``req`` starts decoding."""
        peer = self.peer
        remote = peer.submit(list(req.tokens), 1, hold_for_transfer=True)
        for _ in range(1000):
            if remote.state is ReqState.TRANSFER or remote.done:
                break
            peer.step()
        if remote.state is not ReqState.TRANSFER:
            raise RuntimeError(f"PD transfer: prefill of request {req.rid} did not complete on the prefill engine")
        pm, mem = peer.memory, self.memory
        src_slots = pm.r2t.read(remote.row, 0, remote.kv_len)
        slots = mem.alloc_slots(len(src_slots))
        if mem.swa is not None and pm.swa is not None:
            mem.swa.release([d for d, s in zip(slots, src_slots, strict=True) if not pm.swa.resident(s)])
        copy_kv(mem, slots, pm, src_slots, chunk=self.chunk, faults=self.faults)
        copy_canaries(self.canary, mem, slots, peer.canary, pm, src_slots)
        self.requests.receive_transfer(req, remote.tokens, slots)
        peer.release_transferred(remote)

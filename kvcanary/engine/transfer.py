"""PD disaggregation: a prefill engine computes a request's KV, which is copied into a decode engine's
pool together with its canary records (the records are content-only, so they stay valid at new slots).

The decode side verifies the transferred prefix with its first forward: HEAD checks the records, TAIL
checks the real-KV fingerprints against the bytes that actually arrived.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kvcanary.engine.faults import Fault
from kvcanary.engine.request import ReqState, Request

if TYPE_CHECKING:
    from kvcanary.engine.engine import Engine


def _copy_rows(dst: torch.Tensor, dst_idx: list[int], src: torch.Tensor, src_idx: list[int]) -> None:
    if dst_idx:
        d = torch.tensor(dst_idx, dtype=torch.int64, device=dst.device)
        s = torch.tensor(src_idx, dtype=torch.int64, device=src.device)
        dst[d] = src[s].to(dst.device)


def copy_kv(dst: Engine, dst_slots: list[int], src: Engine, src_slots: list[int]) -> None:
    """Copy every layer's K/V of ``src_slots`` (full pool, and resident SWA slots) chunk by chunk."""
    n = len(src_slots)
    chunk = dst.cfg.transfer_chunk
    num_chunks = -(-n // chunk)
    if n % chunk and dst.faults.fire(Fault.CORRUPTED_TRANSFER, f"transfer of {n} tokens dropped the last "
                                     f"{n % chunk} tokens' K/V"):
        num_chunks = n // chunk  # BUG: floor division drops the last partial chunk
    dm, sm = dst.memory, src.memory
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


def copy_canaries(dst: Engine, dst_slots: list[int], src: Engine, src_slots: list[int]) -> None:
    """Carry every canary buffer's records along (FULL by full slot, SWA by SWA slot)."""
    if dst.canary is None:
        return
    if src.canary is None:
        raise RuntimeError("PD transfer: the decode engine runs the canary but the prefill engine does not; "
                           "its records cannot travel with the KV")
    src_bufs = dict(src.canary.transfer_buffers())
    dm, sm = dst.memory, src.memory
    for name, buf in dst.canary.transfer_buffers():
        if name.startswith("swa."):
            assert dm.swa is not None and sm.swa is not None
            pairs = [(dm.swa.host_lut[x], sm.swa.host_lut[y]) for x, y in zip(dst_slots, src_slots, strict=True)
                     if sm.swa.host_lut[y]]
            _copy_rows(buf, [p[0] for p in pairs], src_bufs[name], [p[1] for p in pairs])
        else:
            _copy_rows(buf, dst_slots, src_bufs[name], src_slots)


def pull_remote_prefill(dst: Engine, req: Request) -> None:
    """Prefill ``req`` on ``dst.prefill_peer``, then move its KV and canaries into ``dst`` (decode side)."""
    peer = dst.prefill_peer
    assert peer is not None
    remote = peer.submit(list(req.tokens), 1, hold_for_transfer=True)
    for _ in range(1000):
        if remote.state is ReqState.TRANSFER or remote.done:
            break
        peer.step()
    if remote.state is not ReqState.TRANSFER:
        raise RuntimeError(f"PD transfer: prefill of request {req.rid} did not complete on the prefill engine")
    n = remote.kv_len
    src_slots = peer.memory.r2t.read(remote.row, 0, n)
    mem = dst.memory
    row = mem.rows.alloc(1)[0]
    slots = mem.alloc_slots(n)
    if mem.swa is not None and peer.memory.swa is not None:
        mem.swa.release([d for d, s in zip(slots, src_slots, strict=True) if not peer.memory.swa.resident(s)])
    mem.r2t.write(row, 0, slots)
    copy_kv(dst, slots, peer, src_slots)
    copy_canaries(dst, slots, peer, src_slots)
    req.tokens = list(remote.tokens)
    req.row, req.row_released = row, False
    req.kv_len = req.alloc_len = req.prefill_target = n
    req.protected_len = req.match_len = req.swa_evicted_upto = 0
    req.next_position = n
    req.num_outputs += 1
    req.state = ReqState.DECODE
    peer.release_transferred(remote)

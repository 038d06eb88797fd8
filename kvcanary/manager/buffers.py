"""Canary buffers of one pool group (HEAD/TAIL x K/V) and the real-KV sources over its layer-0 rows.

HEAD and TAIL records live in distinct buffers (as in SGLang): HEAD stamps new tokens before the forward
without real-KV, TAIL stamps them after it with the fingerprint of the freshly written KV; a transfer that
copies only part of a slot's buffers leaves the two inconsistent.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.constructors.real_kv_source import RealKvSourceContract
from kvcanary.constructors.row_source import check_row_source
from kvcanary.consts import CANARY_SLOT_BYTES, REAL_KV_CHUNK_BYTES, PoolKind, RealKvHashMode
from kvcanary.manager.pool import PoolGroupSpec
from kvcanary.sources import RealKvSource

_check_row_bytes = RealKvSourceContract.rule_checker("num_bytes_per_token_multiple_of_16")


def alloc_canary_buf(num_slots: int, device: torch.device) -> torch.Tensor:
    """Zeroed ``uint8 [num_slots, 32]``: one record per slot, slot index = KV (or SWA-pool) slot index."""
    return torch.zeros(num_slots, CANARY_SLOT_BYTES, dtype=torch.uint8, device=device)


def resolve_read_bytes(mode: RealKvHashMode, num_bytes_per_token: int) -> int:
    """Bytes of each slot's row the fingerprint covers: 0 (NONE), 16 (PARTIAL) or the whole row (ALL)."""
    if mode is RealKvHashMode.NONE:
        return 0
    _check_row_bytes(num_bytes_per_token=num_bytes_per_token)  # RealKvSource's rule, its code (KVC-R)
    return REAL_KV_CHUNK_BYTES if mode is RealKvHashMode.PARTIAL else num_bytes_per_token


def make_row_source(layer_buffer: torch.Tensor, mode: RealKvHashMode, *, name: str) -> tuple[RealKvSource, ...]:
    """One source over a ``[num_slots, ...]`` layer buffer (page size 1), or none when mode is NONE.

    The buffer must be contiguous: the source is a *view* of it (a copy would fingerprint a stale snapshot).
    """
    check_row_source(layer_buffer=layer_buffer, mode=mode, name=name)  # the rules: constructors/row_source.py
    num_slots = int(layer_buffer.shape[0])
    u8 = layer_buffer.view(torch.uint8).reshape(num_slots, -1)
    nbpt = int(u8.shape[1])
    read = resolve_read_bytes(mode, nbpt)
    if read == 0:
        return ()
    return (RealKvSource(tensor=u8, page_size=1, num_bytes_per_token=nbpt, read_bytes=read),)


@dataclass(frozen=True, kw_only=True)
class CanaryBufferGroup:
    """One group's canary buffers, sources and translation. ``v_head`` / ``v_tail`` are None without V."""

    kind: PoolKind
    k_head: torch.Tensor
    k_tail: torch.Tensor
    v_head: torch.Tensor | None
    v_tail: torch.Tensor | None
    real_kv_sources_k: tuple[RealKvSource, ...]
    real_kv_sources_v: tuple[RealKvSource, ...]
    swa_window_size: int
    swa_index_lut: torch.Tensor | None

    @classmethod
    def allocate(cls, spec: PoolGroupSpec, *, mode: RealKvHashMode, enable_v: bool) -> CanaryBufferGroup:
        dev = spec.k_layer0.device
        n = spec.num_slots
        with_v = enable_v and spec.v_layer0 is not None
        return cls(
            kind=spec.kind,
            k_head=alloc_canary_buf(n, dev),
            k_tail=alloc_canary_buf(n, dev),
            v_head=alloc_canary_buf(n, dev) if with_v else None,
            v_tail=alloc_canary_buf(n, dev) if with_v else None,
            real_kv_sources_k=make_row_source(spec.k_layer0, mode, name=f"{spec.kind.name} k_layer0"),
            real_kv_sources_v=(make_row_source(spec.v_layer0, mode, name=f"{spec.kind.name} v_layer0")
                               if with_v and spec.v_layer0 is not None else ()),
            swa_window_size=spec.swa_window_size,
            swa_index_lut=spec.full_to_swa_index_mapping,
        )

    @property
    def num_slots(self) -> int:
        return int(self.k_head.shape[0])

    def named_buffers(self) -> list[tuple[str, torch.Tensor]]:
        """``[k_head, k_tail, v_head, v_tail]`` (present ones), named ``full.k_head`` etc.: what a transfer
        of a slot's KV must carry along (SGLang splices them into the pool's buf-info list)."""
        out = [("k_head", self.k_head), ("k_tail", self.k_tail)]
        if self.v_head is not None and self.v_tail is not None:
            out += [("v_head", self.v_head), ("v_tail", self.v_tail)]
        return [(f"{self.kind.name.lower()}.{n}", t) for n, t in out]

"""The paged KV pool (page size 1), req_to_token, and the sliding-window pool with its full→SWA LUT."""

from __future__ import annotations

import torch

from kvcanary.demo.engine.allocator import SlotAllocator


class KvPool:
    """Per-layer K and V buffers ``[num_slots, n_kv_heads, head_dim]`` (slot 0 is the dummy write slot)."""

    def __init__(self, *, num_slots: int, layers: int, n_kv_heads: int, head_dim: int, device: torch.device,
                 dtype: torch.dtype = torch.float32) -> None:
        self.num_slots = num_slots
        shape = (num_slots, n_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]

    def write(self, layer: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """``set_kv_buffer``: ``k[layer][loc] = k`` (a negative loc indexes from the end, as torch does)."""
        self.k[layer][loc] = k
        self.v[layer][loc] = v


class ReqToTokenPool:
    """``req_to_token`` int32 ``[rows, max_context_len]`` on the device, mirrored on the host for the
    scheduler (the two are one tensor on the CPU)."""

    def __init__(self, *, rows: int, max_context_len: int, device: torch.device) -> None:
        self.device_table = torch.zeros(rows, max_context_len, dtype=torch.int32, device=device)
        self.host = self.device_table if device.type == "cpu" else torch.zeros(rows, max_context_len,
                                                                                  dtype=torch.int32)
        self.max_context_len = max_context_len

    def write(self, row: int, start: int, slots: list[int]) -> None:
        if not slots:
            return
        end = start + len(slots)
        if end > self.max_context_len:
            raise ValueError(f"req_to_token: row {row} would grow to {end} > max_context_len {self.max_context_len}")
        self.host[row, start:end] = torch.tensor(slots, dtype=torch.int32)
        if self.host is not self.device_table:
            self.device_table[row, start:end].copy_(self.host[row, start:end], non_blocking=True)

    def read(self, row: int, start: int, end: int) -> list[int]:
        return [int(x) for x in self.host[row, start:end].tolist()]


class SwaPool:
    """The SWA layers' KV pool, its allocator and ``full_to_swa_index_mapping`` (0 = not resident).

    The LUT lives on the device (the canary and the model's SWA writes gather through it) with a host
    mirror the scheduler and the attention gather read.
    """

    def __init__(self, *, num_full_slots: int, num_swa_slots: int, layers: int, n_kv_heads: int, head_dim: int,
                 device: torch.device) -> None:
        self.kv = KvPool(num_slots=num_swa_slots, layers=layers, n_kv_heads=n_kv_heads, head_dim=head_dim,
                         device=device)
        self.allocator = SlotAllocator(num_swa_slots, name="swa-slots")
        self.lut = torch.zeros(num_full_slots, dtype=torch.int64, device=device)
        self.host_lut = [0] * num_full_slots

    def _set(self, full: list[int], swa: list[int]) -> None:
        for f, s in zip(full, swa, strict=True):
            self.host_lut[f] = s
        if full:
            idx = torch.tensor(full, dtype=torch.int64, device=self.lut.device)
            self.lut[idx] = torch.tensor(swa, dtype=torch.int64, device=self.lut.device)

    def assign(self, full: list[int]) -> None:
        """Give every new full slot an SWA slot."""
        self._set(full, self.allocator.alloc(len(full)))

    def release(self, full: list[int], *, clear_mapping: bool = True) -> None:
        """Free the SWA slots of ``full`` (those resident) and, normally, clear their mapping."""
        resident = [f for f in full if f != 0 and self.host_lut[f] != 0]
        self.allocator.free(self.host_lut[f] for f in resident)
        if clear_mapping:
            self._set(resident, [0] * len(resident))

    def resident(self, full_slot: int) -> bool:
        return self.host_lut[full_slot] != 0

    def move(self, src_full: int, dst_full: int) -> None:
        """Hand ``src_full``'s SWA slot to ``dst_full`` (a deduplicated tree slot takes over a request's)."""
        s = self.host_lut[src_full]
        self._set([dst_full, src_full], [s, 0])

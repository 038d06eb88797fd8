"""RealKvSource: one buffer whose bytes each slot's real-KV fingerprint covers."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.constructors.real_kv_source import check_real_kv_source


@dataclass(frozen=True, slots=True, kw_only=True)
class RealKvSource:
    """A view of a live KV buffer and how slots map into it.

    Slot ``s`` owns ``tensor_u8[s // page_size, (s % page_size) * num_bytes_per_token :
    (s % page_size + 1) * num_bytes_per_token]``. PARTIAL mode hashes the first 16 bytes of that strip, ALL
    mode the first ``read_bytes``. The tensor must be a *view* of the pool: a copy would hash a snapshot.
    """

    tensor: torch.Tensor
    page_size: int
    num_bytes_per_token: int
    read_bytes: int

    def __post_init__(self) -> None:
        check_real_kv_source(
            tensor=self.tensor,
            page_size=self.page_size,
            num_bytes_per_token=self.num_bytes_per_token,
            read_bytes=self.read_bytes,
        )

    @property
    def row_stride_bytes(self) -> int:
        return int(self.tensor.stride(0)) * self.tensor.element_size()

    @property
    def num_rows(self) -> int:
        return int(self.tensor.shape[0])

"""The engine's description of the KV pool a manager protects (engine-neutral).

An engine hands the manager views of its live buffers: layer 0's K and V rows of each pool group (the
real-KV fingerprint sources), ``req_to_token``, and for a sliding-window group its window and full→SWA LUT.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.consts import PoolKind


@dataclass(frozen=True, kw_only=True)
class PoolGroupSpec:
    """One group of the pool: FULL (canary index = KV slot) or SWA (canary index = SWA-pool slot).

    ``k_layer0`` / ``v_layer0``: the group's layer-0 K and V buffers, ``[num_slots, ...]`` views of the live
    pool (one row per slot, padding slot 0 included). ``v_layer0`` None means the group has no V half (MLA).
    For SWA: ``swa_window_size > 0`` and ``full_to_swa_index_mapping`` int64 ``[full_num_slots]`` (0 = none).
    ``layers``: every layer's K and V buffers of the group (``K0, V0, K1, V1, ...``, each ``[num_slots, ...]``,
    contiguous), for ``CanaryConfig(layer_rotation=n)`` (:mod:`kvcanary.manager.rotation`); empty: none.
    """

    kind: PoolKind
    k_layer0: torch.Tensor
    v_layer0: torch.Tensor | None = None
    swa_window_size: int = 0
    full_to_swa_index_mapping: torch.Tensor | None = None
    layers: tuple[torch.Tensor, ...] = ()

    def __post_init__(self) -> None:
        name = f"PoolGroupSpec({self.kind.name})"
        for i, buf in enumerate(self.layers):
            if buf.ndim < 1 or buf.shape[0] != self.k_layer0.shape[0] or buf.device != self.k_layer0.device:
                raise ValueError(f"kv-canary: {name}.layers[{i}] must be a [num_slots, ...] buffer on "
                                 f"{self.k_layer0.device} with {self.k_layer0.shape[0]} slots, got shape "
                                 f"{tuple(buf.shape)} on {buf.device}")
        if self.k_layer0.ndim < 1 or self.k_layer0.shape[0] < 2:
            raise ValueError(f"kv-canary: {name}.k_layer0 must have at least 2 slots (slot 0 is padding), "
                             f"got shape {tuple(self.k_layer0.shape)}")
        if self.v_layer0 is not None:
            if self.v_layer0.shape[0] != self.k_layer0.shape[0]:
                raise ValueError(f"kv-canary: {name}.v_layer0 must have as many slots as k_layer0 "
                                 f"({self.k_layer0.shape[0]}), got {self.v_layer0.shape[0]}")
            if self.v_layer0.device != self.k_layer0.device:
                raise ValueError(f"kv-canary: {name}.v_layer0 must be on k_layer0's device {self.k_layer0.device}")
        if self.kind is PoolKind.SWA:
            if self.swa_window_size <= 0:
                raise ValueError(f"kv-canary: {name}.swa_window_size must be positive for an SWA group, "
                                 f"got {self.swa_window_size}")
            lut = self.full_to_swa_index_mapping
            if lut is None:
                raise ValueError(f"kv-canary: {name}.full_to_swa_index_mapping is required for an SWA group")
            if lut.dtype != torch.int64 or lut.ndim != 1 or lut.shape[0] < 1 or not lut.is_contiguous():
                raise ValueError(f"kv-canary: {name}.full_to_swa_index_mapping must be a contiguous 1-D int64 "
                                 f"tensor, got dtype {lut.dtype} shape {tuple(lut.shape)}")
            if lut.device != self.k_layer0.device:
                raise ValueError(f"kv-canary: {name}.full_to_swa_index_mapping must be on k_layer0's device "
                                 f"{self.k_layer0.device}, got {lut.device}")
        elif self.swa_window_size != 0 or self.full_to_swa_index_mapping is not None:
            raise ValueError(f"kv-canary: {name} must have swa_window_size=0 and no full_to_swa_index_mapping")

    @property
    def num_slots(self) -> int:
        """Slots of the group (padding slot 0 included): the length of its canary buffers."""
        return int(self.k_layer0.shape[0])


@dataclass(frozen=True, kw_only=True)
class KvPoolSpec:
    """The pool: its groups (one FULL, optionally one SWA), ``req_to_token`` (int32 ``[rows, max_len]``,
    row 0 = padding) and the token offset (0 for target pools, +1 for a speculative draft pool, whose slot
    ``p`` holds the KV of the token at ``p + 1``)."""

    groups: tuple[PoolGroupSpec, ...]
    req_to_token: torch.Tensor
    kv_token_id_vs_position_offset: int = 0

    def __post_init__(self) -> None:
        kinds = [g.kind for g in self.groups]
        if kinds not in ([PoolKind.FULL], [PoolKind.FULL, PoolKind.SWA]):
            raise ValueError(f"kv-canary: KvPoolSpec.groups must be (FULL,) or (FULL, SWA), got "
                             f"{tuple(k.name for k in kinds)}")
        r2t = self.req_to_token
        if r2t.dtype != torch.int32 or r2t.ndim != 2 or not r2t.is_contiguous():
            raise ValueError(f"kv-canary: KvPoolSpec.req_to_token must be a contiguous 2-D int32 tensor, got "
                             f"dtype {r2t.dtype} shape {tuple(r2t.shape)}")
        if r2t.device != self.groups[0].k_layer0.device:
            raise ValueError(f"kv-canary: KvPoolSpec.req_to_token must be on the pool's device "
                             f"{self.groups[0].k_layer0.device}, got {r2t.device}")
        if self.kv_token_id_vs_position_offset not in (0, 1):
            raise ValueError(f"kv-canary: KvPoolSpec.kv_token_id_vs_position_offset must be 0 (target) or 1 "
                             f"(draft), got {self.kv_token_id_vs_position_offset}")
        if len(self.groups) == 2:
            lut = self.groups[1].full_to_swa_index_mapping
            assert lut is not None
            if lut.shape[0] < self.groups[0].num_slots:
                raise ValueError(f"kv-canary: full_to_swa_index_mapping must cover every full slot "
                                 f"({self.groups[0].num_slots}), got length {lut.shape[0]}")

    @property
    def device(self) -> torch.device:
        """The pool's device: every canary buffer is allocated there."""
        return self.groups[0].k_layer0.device

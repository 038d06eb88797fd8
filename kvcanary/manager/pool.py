"""The engine's description of the KV pool a manager protects (engine-neutral).

An engine hands the manager views of its live buffers: layer 0's K and V rows of each pool group (the
real-KV fingerprint sources), ``req_to_token``, and for a sliding-window group its window and full→SWA LUT.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.constructors.pool import validate_kv_pool, validate_pool_group
from kvcanary.consts import PoolKind


@dataclass(frozen=True, kw_only=True)
class PoolGroupSpec:
    """One group of the pool: FULL (canary index = KV slot) or SWA (canary index = SWA-pool slot).

    ``k_layer0`` / ``v_layer0``: the group's layer-0 K and V buffers, ``[num_slots, ...]`` views of the live
    pool (one row per slot, padding slot 0 included). ``v_layer0`` None means the group has no V half (MLA).
    For SWA: ``swa_window_size > 0`` and ``full_to_swa_index_mapping`` int64 ``[full_num_slots]`` (0 = none:
    verify skips such a slot, and a write seed of 0 starts the request's SWA chain at the anchor).
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
        validate_pool_group(self)  # the rules: kvcanary/constructors/pool.py

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
        validate_kv_pool(self)

    @property
    def device(self) -> torch.device:
        """The pool's device: every canary buffer is allocated there."""
        return self.groups[0].k_layer0.device

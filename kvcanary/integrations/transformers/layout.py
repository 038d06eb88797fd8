"""Where transformers' paged cache keeps what the canary needs, per release line (5.17-5.23).

The canary's slot space is the cache's *physical token index* space, the one the engine's own
``write_index`` / ``read_index`` tensors use: token ``p`` of a request lives at
``block_table[p // page] * stride + p % page``. Layer 0's K and V rows, viewed so that row ``i`` is
physical index ``i``, are the real-KV fingerprint sources. Two layouts exist:

- 5.22+ (``cache.cache_allocators``): one flat byte tensor, each allocator viewing it as
  ``[tokens, 2, kv_heads, head_dim]``; a block spans ``2 * page * layers`` rows (``block_physical_stride``).
- 5.17-5.21 (``cache.group_cache_managers``): per-layer ``key_cache`` / ``value_cache`` tensors of
  ``[(blocks + 2) * page, kv_heads, head_dim]``; the stride is the page.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class CacheLayout:
    """The full-attention group of one ``PagedAttentionCache``, read through its own objects."""

    cache: Any
    allocator: Any
    page: int
    stride: int
    k_rows: torch.Tensor
    v_rows: torch.Tensor
    num_token_slots: int
    _cached: Callable[[], list[int]]

    @property
    def block_table(self) -> dict[str, list[int]]:
        """The engine's live ``request id -> block ids`` table (not a copy)."""
        table: dict[str, list[int]] = self.allocator.block_table
        return table

    def cached_blocks(self) -> list[int]:
        """Blocks no request references that the prefix cache keeps for reuse."""
        return self._cached()

    def slot(self, block: int, offset: int) -> int:
        """Physical index of token ``offset`` of ``block``."""
        return block * self.stride + offset

    def block_of(self, slot: int) -> int:
        """The block a physical index belongs to."""
        return slot // self.stride


def _unsupported(what: str) -> RuntimeError:
    return RuntimeError(f"kv-canary: the transformers integration supports models whose layers are all full "
                        f"attention; this cache has {what}. Sliding-window groups keep their own per-request ring "
                        "of blocks, which kvcanary's plan cannot read yet (see docs/transformers.md)")


def read_layout(cache: Any) -> CacheLayout:
    """The layout of ``cache`` (a ``PagedAttentionCache``), for either release line."""
    if hasattr(cache, "cache_allocators"):
        names = list(cache.cache_allocators)
        if names != ["full_attention"]:
            raise _unsupported(f"attention groups {names}")
        alloc = cache.cache_allocators["full_attention"]
        k, v = alloc._kv_token_views[alloc.layer_indices[0]]
        n = int(v.shape[0])
        ledger = alloc.ledger
        return CacheLayout(cache=cache, allocator=alloc, page=int(alloc.tokens_per_page),
                           stride=int(alloc.block_physical_stride), k_rows=k[:n], v_rows=v,
                           num_token_slots=int(alloc.num_blocks) * int(alloc.tokens_per_page),
                           _cached=lambda: list(ledger.cached_blocks))
    if hasattr(cache, "group_cache_managers"):
        groups = cache.group_cache_managers
        sliding: int = getattr(cache, "num_sliding_attention_groups", 0)
        if len(groups) != 1 or sliding:
            raise _unsupported(f"{len(groups)} layer groups with sliding windows")
        alloc = groups[0]
        page = int(alloc.block_size)
        manager = cache._block_manager
        return CacheLayout(cache=cache, allocator=alloc, page=page, stride=page, k_rows=cache.key_cache[0],
                           v_rows=cache.value_cache[0], num_token_slots=int(cache.num_blocks) * page,
                           _cached=lambda: list(manager._init_block_ids))
    raise RuntimeError("kv-canary: unrecognised transformers paged cache (no cache_allocators or "
                       "group_cache_managers); the integration supports transformers>=5.17,<5.24")


def hand_out_next(layout: CacheLayout, block: int) -> None:
    """Make the engine's allocator hand ``block`` out with its next fresh block (a fault helper: the
    block is given to a second request while its owner still uses it). Restored after one use."""
    if hasattr(layout.cache, "cache_allocators"):
        owner, name = layout.cache.pool, "get_free_blocks"
    else:
        owner, name = layout.cache._block_manager, "get_free_blocks"
    original = getattr(owner, name)

    def once(*args: Any, **kwargs: Any) -> Any:
        got = original(*args, **kwargs)
        if got:  # the first call that hands a block out (calls for zero blocks happen every step)
            delattr(owner, name)  # the class's method again
            got[0] = block
        return got

    setattr(owner, name, once)

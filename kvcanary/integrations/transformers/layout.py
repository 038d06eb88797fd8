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
class SlidingLayout:
    """The sliding-window group (5.22+): a per-request ring of blocks where position ``p`` lives at ring
    index ``p % window``; ``index`` is its row in the engine's ``write_index`` / ``read_index`` lists."""

    allocator: Any
    index: int
    page: int
    stride: int
    window: int
    k_rows: torch.Tensor
    v_rows: torch.Tensor

    @property
    def block_table(self) -> dict[str, list[int]]:
        """The engine's live ``request id -> ring blocks`` table (not a copy)."""
        table: dict[str, list[int]] = self.allocator.block_table
        return table

    def ring_slot(self, blocks: list[int], position: int) -> int:
        """Physical index holding ``position`` in a request's ring (``blocks``: its sliding block table)."""
        page, offset = divmod(position % self.window, self.page)
        return blocks[page] * self.stride + offset


@dataclass
class CacheLayout:
    """The full-attention group of one ``PagedAttentionCache`` (and its sliding group, if any), read through
    the cache's own objects; ``index`` is the full group's row in ``write_index`` / ``read_index``."""

    cache: Any
    allocator: Any
    page: int
    stride: int
    k_rows: torch.Tensor
    v_rows: torch.Tensor
    num_token_slots: int
    _cached: Callable[[], list[int]]
    index: int = 0
    sliding: SlidingLayout | None = None

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
    return RuntimeError(f"kv-canary: the transformers integration supports models with full-attention layers and, "
                        f"on transformers>=5.22, at most one sliding-window group beside them; this cache has "
                        f"{what} (see docs/transformers.md)")


def _rows(alloc: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer 0 of the group: K and V views indexed by physical index, cut to one length."""
    k, v = alloc._kv_token_views[alloc.layer_indices[0]]
    n = min(int(k.shape[0]), int(v.shape[0]))
    return k[:n], v[:n]


def read_layout(cache: Any) -> CacheLayout:
    """The layout of ``cache`` (a ``PagedAttentionCache``), for either release line."""
    if hasattr(cache, "cache_allocators"):
        names = sorted(cache.cache_allocators)
        if names not in (["full_attention"], ["full_attention", "sliding_attention"]):
            raise _unsupported(f"attention groups {names}")
        alloc = cache.cache_allocators["full_attention"]
        k, v = _rows(alloc)
        ledger = alloc.ledger
        sliding = None
        if "sliding_attention" in names:
            sw = cache.cache_allocators["sliding_attention"]
            if int(sw.sliding_window) < 2:
                raise _unsupported(f"a sliding window of {sw.sliding_window}")
            sk, sv = _rows(sw)
            n = min(int(k.shape[0]), int(sk.shape[0]))
            k, v, sk, sv = k[:n], v[:n], sk[:n], sv[:n]
            sliding = SlidingLayout(allocator=sw, index=int(sw.index), page=int(sw.tokens_per_page),
                                    stride=int(sw.block_physical_stride), window=int(sw.sliding_window),
                                    k_rows=sk, v_rows=sv)
        return CacheLayout(cache=cache, allocator=alloc, page=int(alloc.tokens_per_page),
                           stride=int(alloc.block_physical_stride), k_rows=k, v_rows=v,
                           num_token_slots=int(alloc.num_blocks) * int(alloc.tokens_per_page),
                           _cached=lambda: list(ledger.cached_blocks), index=int(alloc.index), sliding=sliding)
    if hasattr(cache, "group_cache_managers"):
        groups = cache.group_cache_managers
        sliding_groups: int = getattr(cache, "num_sliding_attention_groups", 0)
        if len(groups) != 1 or sliding_groups:
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

"""KV memory management: slot allocation with eviction, the prefix cache, and what requests own.

Ownership rule: positions ``[0, protected_len)`` of a request's row are radix-tree slots (locked by the
request through ``last_node``); ``[protected_len, alloc_len)`` are the request's own. Inserting into the
tree moves own slots under the tree's protection (duplicates of slots the tree already had are freed).
These methods read a request and return what changed; :class:`~kvcanary.demo.engine.requests.RequestTable`
records it on the request.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import torch

from kvcanary.demo.engine.allocator import OutOfSlots, SlotAllocator
from kvcanary.demo.engine.config import EngineConfig
from kvcanary.demo.engine.faults import Fault, FaultInjector
from kvcanary.demo.engine.kv_pool import KvPool, ReqToTokenPool, SwaPool
from kvcanary.demo.engine.radix import RadixCache, TreeNode

if TYPE_CHECKING:
    from kvcanary.demo.engine.requests import Request


class KvMemory:
    """Pools, allocators, req_to_token and the radix cache of one engine."""

    def __init__(self, cfg: EngineConfig, device: torch.device, faults: FaultInjector) -> None:
        m = cfg.model
        self.cfg = cfg
        self.faults = faults
        self.full_layers = [i for i in range(m.n_layers) if not cfg.is_swa_layer(i)]
        self.swa_layers = [i for i in range(m.n_layers) if cfg.is_swa_layer(i)]
        self.allocator = SlotAllocator(cfg.num_slots, name="kv-slots")
        self.rows = SlotAllocator(cfg.req_rows, name="req-rows", ascending=False)
        self.r2t = ReqToTokenPool(rows=cfg.req_rows, max_context_len=cfg.max_context_len, device=device)
        self.pool = KvPool(num_slots=cfg.num_slots, layers=len(self.full_layers), n_kv_heads=m.n_kv_heads,
                           head_dim=m.head_dim, device=device)
        self.swa = (SwaPool(num_full_slots=cfg.num_slots, num_swa_slots=cfg.num_slots, layers=len(self.swa_layers),
                            n_kv_heads=m.n_kv_heads, head_dim=m.head_dim, device=device)
                    if cfg.swa_window else None)
        self.tree = (RadixCache(on_free=self.free_slots, scrub=self.scrub, faults=faults)
                     if cfg.prefix_cache else None)
        self.bigram_keys = cfg.num_draft_tokens > 0

    # -- slots --------------------------------------------------------------------------------------------
    def alloc_slots(self, n: int) -> list[int]:
        """``n`` fresh full slots (each with an SWA slot on SWA engines), evicting from the tree if needed."""
        short = n - self.allocator.available
        if self.swa is not None:  # quarantined SWA slots can leave the SWA pool the shorter one
            short = max(short, n - self.swa.allocator.available)
        if short > 0 and self.tree is not None:
            self.tree.evict(short)
        if n > self.allocator.available:
            raise OutOfSlots(f"kv-slots: {n} requested, {self.allocator.available} free after eviction")
        slots = self.allocator.alloc(n)
        if self.swa is not None:
            self.swa.assign(slots)
        return slots

    def free_slots(self, slots: list[int]) -> None:
        if self.swa is not None:
            self.swa.release(slots)
        self.allocator.free(slots)

    def scrub(self, slots: list[int]) -> None:
        """Zero the full-pool K/V of ``slots`` (freed KV must not leak into the next owner's attention)."""
        if not slots:
            return
        idx = torch.tensor(slots, dtype=torch.int64, device=self.pool.k[0].device)
        for k, v in zip(self.pool.k, self.pool.v, strict=True):
            k[idx] = 0.0
            v[idx] = 0.0

    def free_capacity(self) -> int:
        free = self.allocator.available
        if self.swa is not None and self.swa.allocator.held_out:  # quarantined SWA slots: the SWA pool is shorter
            free = min(free, self.swa.allocator.available)
        return free + (self.tree.evictable_size() if self.tree is not None else 0)

    # -- prefix cache -------------------------------------------------------------------------------------
    def keys(self, tokens: Sequence[int], n: int) -> list[Hashable]:
        """Radix keys of the first ``n`` positions (bigrams with speculative decoding)."""
        if self.bigram_keys:
            return [(tokens[i], tokens[i + 1]) for i in range(n)]
        return list(tokens[:n])

    def match(self, req: Request) -> tuple[list[int], TreeNode | None]:
        """The reusable cached prefix of ``req`` (at most ``len(tokens) - 1``: the last token is recomputed
        for its logits), cut back until its sliding window is resident on SWA engines."""
        if self.tree is None:
            return [], None
        limit = len(req.tokens) - 1
        keys = self.keys(req.tokens, limit)
        slots, node = self.tree.match_prefix(keys)
        m = len(slots)
        if self.swa is not None:
            w = self.cfg.swa_window
            while m > 0 and not all(self.swa.resident(s) for s in slots[max(0, m - w) : m]):
                m -= 1
            if m < len(slots):
                slots, node = self.tree.match_prefix(keys[:m])
        return slots[:m], node

    def cache_unfinished(self, req: Request) -> TreeNode | None:
        """Insert the request's KV'd prefix into the tree and move its lock there (SGLang's
        ``cache_unfinished_req``); the node that now protects ``[0, kv_len)``, None without a tree."""
        if self.tree is None:
            return None
        node = self._insert(req)
        self.tree.inc_lock(node)
        if req.last_node is not None:
            self.tree.dec_lock(req.last_node)
        return node

    def cache_finished(self, req: Request) -> None:
        """Hand everything the request computed to the tree (or free it without one), free its unused
        reservation and drop its lock (its row is the request table's to return)."""
        self.free_slots(self.r2t.read(req.row, req.kv_len, req.alloc_len))
        if self.tree is None:
            self.free_slots(self.r2t.read(req.row, req.protected_len, req.kv_len))
        else:
            self._insert(req)
            if req.last_node is not None:
                self.tree.dec_lock(req.last_node)

    def _insert(self, req: Request) -> TreeNode:
        assert self.tree is not None
        n = req.kv_len
        keys = self.keys(req.tokens, n)
        row_slots = self.r2t.read(req.row, 0, n)
        present = self.tree.insert(keys, row_slots)
        tree_slots, node = self.tree.match_prefix(keys)
        dups: list[int] = []
        for p in range(req.protected_len, present):
            own, kept = row_slots[p], tree_slots[p]
            if own == kept:
                continue
            if self.swa is not None and not self.swa.resident(kept) and self.swa.resident(own):
                self.swa.move(own, kept)  # the tree's copy lost its SWA slot: adopt the request's
            dups.append(own)
        if dups:
            self.free_slots(dups)
            self.r2t.write(req.row, req.protected_len, tree_slots[req.protected_len : present])
        return node

    # -- quarantine (the canary's isolate policy) ---------------------------------------------------------
    def mapped_to(self, swa_slots: set[int]) -> set[int]:
        """The full slots whose ``full_to_swa_index_mapping`` names one of ``swa_slots``."""
        if self.swa is None or not swa_slots:
            return set()
        return {f for f, s in enumerate(self.swa.host_lut) if f and s in swa_slots}

    def quarantine(self, slots: set[int], swa_slots: set[int]) -> None:
        """Take full ``slots`` and SWA ``swa_slots`` out of service: off the free lists for good (until
        :meth:`reinstate`), and out of the radix tree with every node below them (whose other slots are
        freed: their KV was computed over the corrupt prefix), and so every tree node whose slots map to a
        quarantined SWA slot."""
        drop = slots | self.mapped_to(swa_slots)
        self.allocator.hold_out(slots)
        if self.swa is not None:
            self.swa.allocator.hold_out(swa_slots)
            self.swa.release(sorted(s for s in slots if self.swa.resident(s)))  # no full slot keeps its SWA slot
        if self.tree is not None and drop:
            freed = [s for n in self.tree.drop_containing(drop) for s in n.value]
            self.free_slots(freed)

    def reinstate(self, slots: set[int], swa_slots: set[int]) -> None:
        """Back in service: the next owner's write rewrites their KV and canary records."""
        self.scrub(sorted(slots))
        if self.swa is not None:
            self.swa.allocator.reinstate(swa_slots)
        self.allocator.reinstate(slots)

    # -- releasing ------------------------------------------------------------------------------------------
    def release_uncached(self, req: Request, *, retract: bool = False) -> None:
        """Free the request's own slots and unlock its tree prefix (abort, retract)."""
        start = req.protected_len
        if not retract and req.protected_len > req.match_len and self.faults.fire(
                Fault.RADIX_UAF, f"abort of request {req.rid} freed tree-held positions "
                f"[{req.match_len}, {req.protected_len})"):
            start = req.match_len  # BUG: the admission-time match length, not what the tree now protects
        own = self.r2t.read(req.row, start, req.alloc_len)
        self.free_slots(own)
        if retract and own and self.faults.fire(Fault.DOUBLE_ALLOC, f"retract of request {req.rid} freed "
                                                f"{len(own)} slots twice"):
            self.free_slots(own)  # BUG: the stale decode-reservation cleanup frees the same range again
        if self.tree is not None and req.last_node is not None:
            self.tree.dec_lock(req.last_node)

    def evict_swa_window(self, req: Request) -> int | None:
        """Free the SWA slots of the request's own tokens that fell out of its window (the next forward
        verifies and attends over ``[kv_len - window, kv_len)`` only); the new eviction frontier, None
        when nothing was evicted."""
        if self.swa is None:
            return None
        end = req.kv_len - self.cfg.swa_window
        start = max(req.swa_evicted_upto, req.protected_len)
        if end <= start:
            return None
        slots = self.r2t.read(req.row, start, end)
        stale = self.faults.fire(Fault.STALE_SWA_TRANSLATION, f"request {req.rid}: mapping of positions "
                                 f"[{start}, {end}) left pointing at freed SWA slots")
        self.swa.release(slots, clear_mapping=not stale)  # BUG when stale: the LUT keeps naming freed slots
        return end

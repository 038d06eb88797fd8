"""A radix prefix cache over KV slots (page size 1): match, insert with dedup, lock refs, LRU eviction.

Keys are one hashable per position: the token id, or for speculative decoding the bigram
``(token[p], token[p + 1])`` (the draft pool's slot ``p`` holds the KV of token ``p + 1``, so a reusable
prefix must agree one token further; SGLang's EAGLE radix keys do the same).

The sweep's entries are kept from the tree's own events: a node's entries (slot, position, predecessor)
never change once it is inserted (a split divides them, in order), so each node builds its block once, and
the sweep's list is only re-joined after an insert, an eviction or a drop changed the tree.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

import torch

from kvcanary.demo.engine.faults import Fault, FaultInjector
from kvcanary.manager.sweep import SweepEntries

Key = Hashable


@dataclass(eq=False)
class TreeNode:
    key: list[Key]
    value: list[int]
    parent: TreeNode | None
    children: dict[Key, TreeNode] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0
    entries: torch.Tensor | None = field(default=None, repr=False)
    """int64 ``[3, len(value)]``: each slot, its position, its predecessor slot (-1 under the root)."""

    @property
    def is_leaf(self) -> bool:
        return not self.children


class RadixCache:
    """``on_free(slots)`` returns evicted slots to the allocator; ``scrub(slots)`` zeroes their KV."""

    def __init__(self, *, on_free: Callable[[list[int]], None], scrub: Callable[[list[int]], None] | None = None,
                 faults: FaultInjector | None = None) -> None:
        self.root = TreeNode(key=[], value=[], parent=None, lock_ref=1)
        self._on_free = on_free
        self._scrub = scrub
        self._faults = faults if faults is not None else FaultInjector()
        self._clock = itertools.count(1)
        self.evicted_slots = 0
        self.version = 0
        """Bumped by every change of the cached entries (insert of a new node, eviction, drop)."""
        self._swept: tuple[int, SweepEntries] | None = None  # (version, the entries joined at it)

    # -- lookup and insert --------------------------------------------------------------------------------
    def match_prefix(self, keys: list[Key]) -> tuple[list[int], TreeNode]:
        """The slots of the longest cached prefix of ``keys`` and the node it ends in."""
        node, i, slots = self.root, 0, []
        now = next(self._clock)
        while i < len(keys):
            child = node.children.get(keys[i])
            if child is None:
                break
            n = _common(child.key, keys, i)
            if n < len(child.key):
                child = self._split(child, n)
            slots += child.value
            child.last_access = now
            node, i = child, i + n
        return slots, node

    def insert(self, keys: list[Key], slots: list[int]) -> int:
        """Insert ``keys -> slots``; return how many leading positions were already cached (whose slots in
        ``slots`` are now duplicates the caller must free)."""
        if len(keys) != len(slots):
            raise ValueError(f"radix insert: {len(keys)} keys but {len(slots)} slots")
        node, i = self.root, 0
        now = next(self._clock)
        while i < len(keys):
            child = node.children.get(keys[i])
            if child is None:
                value = list(slots[i:])
                new = TreeNode(key=list(keys[i:]), value=value, parent=node, last_access=now,
                               entries=_entries(value, depth=i, prev=node.value[-1] if node.value else -1))
                node.children[keys[i]] = new
                self.version += 1
                return i
            n = _common(child.key, keys, i)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            node, i = child, i + n
        return i

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Split ``child`` after ``n`` positions; return the new upper node."""
        parent = child.parent
        assert parent is not None
        ent = child.entries
        upper = TreeNode(key=child.key[:n], value=child.value[:n], parent=parent, lock_ref=child.lock_ref,
                         last_access=child.last_access, entries=ent[:, :n] if ent is not None else None)
        parent.children[child.key[0]] = upper
        child.key, child.value, child.parent = child.key[n:], child.value[n:], upper
        child.entries = ent[:, n:] if ent is not None else None
        upper.children[child.key[0]] = child
        return upper

    # -- locks ----------------------------------------------------------------------------------------------
    def inc_lock(self, node: TreeNode) -> None:
        n: TreeNode | None = node
        while n is not None and n is not self.root:
            n.lock_ref += 1
            n = n.parent

    def dec_lock(self, node: TreeNode) -> None:
        n: TreeNode | None = node
        while n is not None and n is not self.root:
            n.lock_ref -= 1
            n = n.parent

    # -- eviction -------------------------------------------------------------------------------------------
    def nodes(self) -> Iterator[tuple[TreeNode, int]]:
        """Every non-root node with its depth (positions above it), depth-first in children order."""
        stack: list[tuple[TreeNode, int]] = [(c, 0) for c in reversed(list(self.root.children.values()))]
        while stack:
            node, depth = stack.pop()
            yield node, depth
            stack.extend((c, depth + len(node.value)) for c in reversed(list(node.children.values())))

    def evictable_size(self) -> int:
        return sum(len(n.value) for n, _ in self.nodes() if n.lock_ref == 0)

    def total_size(self) -> int:
        return sum(len(n.value) for n, _ in self.nodes())

    def evict(self, num_slots: int) -> int:
        """Evict least-recently-used unlocked leaves until ``num_slots`` slots are freed; return the count."""
        heap = [(n.last_access, id(n), n) for n, _ in self.nodes() if n.is_leaf and n.lock_ref == 0]
        heapq.heapify(heap)
        freed: list[int] = []
        while len(freed) < num_slots and heap:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            assert parent is not None
            del parent.children[node.key[0]]
            freed += node.value
            if parent is not self.root and parent.is_leaf and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        if not freed:
            return 0
        self.version += 1
        self._on_free(freed)
        if self._scrub is not None:
            target = freed
            if heap and self._faults.fire(Fault.KV_FLIP_CACHED, f"scrubbed cached leaf {heap[0][2].value[:4]}..."):
                target = heap[0][2].value  # BUG: peeks the heap after the pops: the next LRU leaf, still cached
            self._scrub(target)
        self.evicted_slots += len(freed)
        return len(freed)

    def drop_containing(self, slots: set[int]) -> list[TreeNode]:
        """Take every node holding one of ``slots`` out of the tree, with its subtree (the KV below a corrupt
        slot was computed attending to it); return the removed nodes. Their slots are the caller's to free."""
        removed: list[TreeNode] = []
        for node, _ in list(self.nodes()):
            if node.parent is None or not slots.intersection(node.value):
                continue
            if node.parent.children.get(node.key[0]) is not node:
                continue  # already below a removed node
            del node.parent.children[node.key[0]]
            stack = [node]
            while stack:
                n = stack.pop()
                removed.append(n)
                stack.extend(n.children.values())
        if removed:
            self.version += 1
        return removed

    # -- the sweep's view -------------------------------------------------------------------------------------
    def sweep_entries(self, *, unlocked_only: bool = False) -> SweepEntries:
        """One entry per cached slot: (slot, position = depth + j, predecessor slot or -1 under the root), in
        depth-first order. Joined from the nodes' own entry blocks; the same object again while the tree's
        entries did not change (``unlocked_only`` entries depend on the locks: joined every call)."""
        if not unlocked_only and self._swept is not None and self._swept[0] == self.version:
            return self._swept[1]
        blocks = [n.entries for n, _ in self.nodes()
                  if n.entries is not None and not (unlocked_only and n.lock_ref > 0)]
        joined = torch.cat(blocks, dim=1) if blocks else torch.zeros(3, 0, dtype=torch.int64)
        out = SweepEntries(joined[0], joined[1], joined[2])
        if not unlocked_only:
            self._swept = (self.version, out)
        return out


def _entries(value: list[int], *, depth: int, prev: int) -> torch.Tensor:
    """A new node's entry block: its slots, positions ``depth + j``, and each slot's predecessor."""
    n = len(value)
    out = torch.empty(3, n, dtype=torch.int64)
    out[0] = torch.tensor(value, dtype=torch.int64)
    out[1] = torch.arange(depth, depth + n, dtype=torch.int64)
    out[2, :1] = prev
    out[2, 1:] = out[0, :-1]
    return out


def _common(a: list[Key], keys: list[Key], start: int) -> int:
    n = 0
    limit = min(len(a), len(keys) - start)
    while n < limit and a[n] == keys[start + n]:
        n += 1
    return n

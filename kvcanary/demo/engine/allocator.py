"""Free-list allocators for KV slots, SWA slots and req_to_token rows (index 0 reserved for padding).

LIFO, like most production allocators (recently freed indices are handed out first, which is also what
makes a use-after-free bite quickly). ``free`` does not check for duplicates: production allocators only
do that in debug modes, and the double-allocation bug class lives exactly in that gap.
"""

from __future__ import annotations

from collections.abc import Iterable


class OutOfSlots(RuntimeError):
    """The pool cannot satisfy an allocation even after eviction."""


class SlotAllocator:
    """Indices ``1 .. size-1``. ``ascending``: the first allocations return 1, 2, 3, ...; otherwise
    size-1, size-2, ... (used for request rows, so admission order and row order differ)."""

    def __init__(self, size: int, *, name: str, ascending: bool = True) -> None:
        if size < 2:
            raise ValueError(f"{name}: size must be >= 2 (index 0 is reserved), got {size}")
        self.size = size
        self.name = name
        self._free: list[int] = list(range(size - 1, 0, -1)) if ascending else list(range(1, size))
        self.held_out: set[int] = set()
        """Quarantined indices: never handed out, and dropped when freed, until :meth:`reinstate`."""

    @property
    def available(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        if n < 0:
            raise ValueError(f"{self.name}: cannot allocate {n} indices")
        if n > len(self._free):
            raise OutOfSlots(f"{self.name}: {n} requested, {len(self._free)} free")
        out = [self._free.pop() for _ in range(n)]
        return out

    def free(self, indices: Iterable[int]) -> None:
        """Return indices to the free list (last freed = first reallocated). Index 0 is ignored."""
        for i in indices:
            if i != 0 and i not in self.held_out:
                self._free.append(i)

    def hold_out(self, indices: Iterable[int]) -> None:
        """Quarantine ``indices``: off the free list (every copy, should a bug have freed one twice) and
        never back on it until :meth:`reinstate`."""
        new = {i for i in indices if i != 0} - self.held_out
        if new:
            self.held_out |= new
            self._free = [i for i in self._free if i not in new]

    def reinstate(self, indices: Iterable[int]) -> None:
        """End the quarantine of ``indices`` and put them back on the free list."""
        back = [i for i in indices if i in self.held_out]
        self.held_out.difference_update(back)
        self.free(back)

    def free_list(self) -> list[int]:
        """A copy of the free list, next-to-be-allocated last (tests and invariants)."""
        return list(self._free)

"""Bounded records of the isolate policy: the newest ``limit`` items of a list (:class:`History`) or of a
mapping (:class:`HistoryMap`), with counts of what was ever added and what was let go.

The guards keep their decisions and failed requests for introspection (tests, demos, a debugging session);
a server that fails requests for weeks must not grow without end, so each record keeps the newest
``CanaryConfig.guard_history`` entries. Monitoring (``kvcanary.monitor``: counters, JSON events) still counts
every one of them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import TypeVar, overload

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

DEFAULT_GUARD_HISTORY: int = 1024
"""Entries each guard record keeps by default (``CanaryConfig.guard_history``)."""


def _checked(limit: int | None) -> int | None:
    """``limit`` if it is None or a positive int: another type is a TypeError, a bool (no count, as in
    ``CanaryConfig.guard_history``) or an int below 1 a ValueError."""
    if limit is None:
        return None
    if not isinstance(limit, int):
        raise TypeError(f"kv-canary: limit must be a positive int or None (keep everything), got "
                        f"{type(limit).__name__} {limit!r}")
    if isinstance(limit, bool) or limit < 1:
        raise ValueError(f"kv-canary: limit must be a positive int or None (keep everything), got {limit!r}")
    return limit


class History(Sequence[T]):
    """The newest ``limit`` items appended (None: every one), oldest first; :attr:`total` counts every
    append, :attr:`dropped` the items let go to stay within ``limit``."""

    __slots__ = ("_items", "limit", "total")

    def __init__(self, limit: int | None = DEFAULT_GUARD_HISTORY) -> None:
        self.limit = _checked(limit)
        self._items: deque[T] = deque(maxlen=limit)
        self.total = 0
        """Items ever appended."""

    @property
    def dropped(self) -> int:
        """Items appended and no longer kept (the oldest go first)."""
        return self.total - len(self._items)

    def append(self, item: T) -> None:
        """Keep ``item`` as the newest; the oldest goes when ``limit`` items are kept already."""
        self._items.append(item)
        self.total += 1

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return list(self._items)[index]
        return self._items[index]

    def __repr__(self) -> str:
        return f"History({list(self._items)!r}, limit={self.limit}, total={self.total})"


class HistoryMap(MutableMapping[K, V]):
    """A mapping that keeps its ``limit`` newest keys (None: every one), in insertion order: setting a key
    makes it the newest (also one already kept), and the oldest key goes once more than ``limit`` are kept.
    :attr:`total` counts every set, :attr:`dropped` the keys let go; ``on_drop(key, value)`` hears each."""

    __slots__ = ("_items", "dropped", "limit", "on_drop", "total")

    def __init__(self, limit: int | None = DEFAULT_GUARD_HISTORY, *,
                 on_drop: Callable[[K, V], None] | None = None) -> None:
        if on_drop is not None and not callable(on_drop):
            raise TypeError(f"kv-canary: on_drop must be a callable (key, value) -> None or None, got "
                            f"{type(on_drop).__name__} {on_drop!r}")
        self.limit = _checked(limit)
        self.on_drop = on_drop
        self._items: dict[K, V] = {}
        self.total = 0
        """Keys ever set (a key set again counts again)."""
        self.dropped = 0
        """Keys let go to stay within ``limit`` (a key deleted by hand is not counted)."""

    def __setitem__(self, key: K, value: V) -> None:
        items = self._items
        items.pop(key, None)  # set again: it becomes the newest
        items[key] = value
        self.total += 1
        if self.limit is not None and len(items) > self.limit:
            oldest = next(iter(items))
            gone = items.pop(oldest)
            self.dropped += 1
            if self.on_drop is not None:
                self.on_drop(oldest, gone)

    def __getitem__(self, key: K) -> V:
        return self._items[key]

    def __delitem__(self, key: K) -> None:
        del self._items[key]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"HistoryMap({self._items!r}, limit={self.limit}, total={self.total})"

"""The slot journal's vocabulary: who holds a block (:class:`Owner`), what happened to it (:class:`JournalKind`),
and one entry as the journal reads it back (:class:`JournalEvent`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple


class OwnerKind(str, Enum):
    """What holds a block: a live request, or the prefix cache (a cached, shared prefix)."""

    REQUEST = "request"
    CACHE = "cache"


@dataclass(frozen=True, slots=True)
class Owner:
    """One holder of a block: an engine request id, or a prefix-cache entry's id.

    ``kind`` may be given as its value (``"request"``), kept as the :class:`OwnerKind` member: the isolate
    policy tells a request from the cache by identity, so a plain string would make the request unfailable.
    Any other kind, or an ``id`` that is no ``str`` (the engine's ids, which :meth:`SlotJournal.finish` names),
    is refused here, before the journal files it."""

    kind: OwnerKind
    id: str

    def __post_init__(self) -> None:
        kind = self.kind
        if type(kind) is not OwnerKind:
            if not isinstance(kind, str):
                raise TypeError(f"kv-canary: Owner.kind must be an OwnerKind, got {type(kind).__name__} {kind!r}")
            try:
                object.__setattr__(self, "kind", OwnerKind(kind))
            except ValueError:
                raise ValueError(f"kv-canary: Owner.kind must be one of {[k.value for k in OwnerKind]} (an "
                                 f"OwnerKind), got {kind!r}") from None
        if not isinstance(self.id, str):
            raise TypeError(f"kv-canary: Owner.id must be a str (the engine's request id or the cache entry's "
                            f"id), got {type(self.id).__name__} {self.id!r}")

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.id}"


class JournalKind(str, Enum):
    """One ownership change of a block."""

    ALLOCATED = "allocated"  # handed to ``owner`` (a fresh block); with positions: and written by it there
    SHARED = "shared"  # ``owner`` holds it too (a prefix hit, a fork)
    WRITTEN = "written"  # ``owner`` wrote positions ``[first_position, last_position]`` into it
    CACHED = "cached"  # the prefix cache keeps it (``owner`` is the cache entry)
    RELEASED = "released"  # ``owner`` no longer holds it (finished, preempted, evicted from the cache)
    FREED = "freed"  # back on the free list: nobody holds it
    QUARANTINED = "quarantined"  # taken out of service after a violation
    REINSTATED = "reinstated"  # back in service (its records were rewritten)


KINDS: tuple[JournalKind, ...] = tuple(JournalKind)
"""Kind code -> kind: the journal keeps a kind as its index here (one byte an event; the order of the enum, tested)."""

KIND_CODE: dict[JournalKind, int] = {k: i for i, k in enumerate(KINDS)}
"""Kind -> its code."""

ADD_CODES = 4
"""Codes below this are the kinds that make ``owner`` a holder of the block: ALLOCATED, SHARED, WRITTEN and
CACHED (a writer holds what it writes)."""

RELEASED = KIND_CODE[JournalKind.RELEASED]
FREED = KIND_CODE[JournalKind.FREED]
QUARANTINED = KIND_CODE[JournalKind.QUARANTINED]
REINSTATED = KIND_CODE[JournalKind.REINSTATED]


def apply_events(kind: memoryview, owner: memoryview, step: memoryview, events: Iterable[int],
                 held: dict[int, int], quarantined: bool) -> bool:
    """Apply the coded events at ``events`` (indices into the columns, oldest first) to one block's ``held``
    (owner code -> join step, in join order; in place) and return its quarantine flag after them: an ADD kind
    adds its owner if absent, RELEASED removes it, FREED clears, QUARANTINED / REINSTATED set / clear the flag.
    The one statement of these rules over coded events (the fold's replay and a busy block's memo use it)."""
    for i in events:
        k, o = kind[i], owner[i]
        if k < ADD_CODES:
            if o >= 0 and o not in held:
                held[o] = step[i]
        elif k == RELEASED:
            if o >= 0:
                held.pop(o, None)
        elif k == FREED:
            held.clear()
        elif k == QUARANTINED:
            quarantined = True
        elif k == REINSTATED:
            quarantined = False
    return quarantined


class JournalEvent(NamedTuple):
    """One entry: at ``step``, ``kind`` happened to ``block`` (for ``owner``, where one is named).

    ``carried``: not an event of the window :meth:`SlotJournal.history` returns but the block's state when
    that window opens (its older events are gone from it): a holder then (SHARED for a request, CACHED for a
    cache entry, at the step it joined), QUARANTINED, or a RELEASED naming no owner when nobody held it."""

    step: int
    kind: JournalKind
    block: int
    owner: Owner | None = None
    first_position: int | None = None
    last_position: int | None = None
    carried: bool = False

    @property
    def wrote(self) -> bool:
        """Whether the event is a write: WRITTEN, or an ALLOCATED that carries the positions its owner wrote
        into the block in the same step (a feed that files the allocation and the first write as one)."""
        return self.kind is JournalKind.WRITTEN or (self.kind is JournalKind.ALLOCATED
                                                    and self.first_position is not None)

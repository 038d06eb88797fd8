"""The optional "describe request R" protocol: what an engine tells a bundle about a slot's owners.

An engine adapter that implements :class:`RequestDescriber` lets bundles show each owner's tokens, positions
and block table; without it a bundle still names the owners (from the journal) and holds every record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kvcanary.constructors.evidence import validate_request_view


@dataclass(frozen=True)
class RequestView:
    """One request as the engine sees it now: ``tokens[i]`` sits at ``positions[i]`` in KV slot ``slots[i]``
    (the request's block table, expanded to slots; -1 where no slot is mapped). ``block_size`` is the
    engine's block (page) size, so ``slots[i] // block_size`` is the block. ``live``: still running."""

    request_id: str
    tokens: tuple[int, ...]
    positions: tuple[int, ...]
    slots: tuple[int, ...]
    block_size: int = 1
    live: bool = True

    def __post_init__(self) -> None:
        validate_request_view(self)  # the rules: kvcanary/constructors/evidence.py (KVC-X codes)

    @property
    def block_table(self) -> list[int]:
        """The distinct blocks of ``slots`` in position order (-1 entries skipped)."""
        out: list[int] = []
        for s in self.slots:
            b = s // self.block_size if s >= 0 else -1
            if b >= 0 and (not out or out[-1] != b):
                out.append(b)
        return out

    def slot_at(self, position: int) -> int | None:
        """The slot the table names for ``position``, None when the request has no such position."""
        try:
            return self.slots[self.positions.index(position)]
        except ValueError:
            return None

    def positions_of(self, slot: int) -> list[int]:
        """Every position whose table entry is ``slot``."""
        return [p for p, s in zip(self.positions, self.slots, strict=True) if s == slot]

    def to_json(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "tokens": list(self.tokens), "positions": list(self.positions),
                "slots": list(self.slots), "block_size": self.block_size, "block_table": self.block_table,
                "live": self.live}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RequestView:
        return cls(str(d["request_id"]), tuple(d["tokens"]), tuple(d["positions"]), tuple(d["slots"]),
                   int(d.get("block_size", 1)), bool(d.get("live", True)))


@runtime_checkable
class RequestDescriber(Protocol):
    """Implemented by an engine adapter that can describe its requests (optional)."""

    def describe_request(self, request_id: str) -> RequestView | None:
        """The request's tokens, positions and slots now; None when the engine no longer knows it."""
        ...

    def requests_holding(self, slot: int) -> list[str]:
        """Ids of the live requests whose block table names ``slot`` now (the readers of a violated slot)."""
        ...

    def engine_version(self) -> str:
        """The engine's name and version, as a bundle records it."""
        ...

"""Checks: the unit a contract compiles to, and the unit the error catalog documents.

A field spec expands into several checks (type, contiguity, dtype, rank, one per sized dimension, device);
a model rule is one check (two for a flag that both requires and forbids). Each check has a stable slug,
a code from the family's code book, a message template, and the explanation the catalog prints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kvcanary_contracts.errors import ContractError

# Phases run in this order; inside a phase, checks run in declaration order.
TYPE = 0
PRESENCE = 10
CONTIGUOUS = 20
DTYPE = 30
SCALAR = 40
RANK = 50
SIZE = 60
RELATION = 70
DEVICE = 80
ALIAS = 90

PHASE_NAMES: Mapping[int, str] = {
    TYPE: "type",
    PRESENCE: "presence",
    CONTIGUOUS: "contiguity",
    DTYPE: "dtype",
    SCALAR: "scalar",
    RANK: "rank",
    SIZE: "size",
    RELATION: "relation",
    DEVICE: "device",
    ALIAS: "aliasing",
}


@dataclass(eq=False)
class Check:
    """One condition of one contract."""

    contract: str
    kind: str
    slug: str
    phase: int
    arguments: tuple[str, ...]
    template: str
    summary: str
    why: str
    fix: str
    error: type[ContractError]
    origin: str
    subject: object
    field_path: str | None = None
    info: Mapping[str, object] = field(default_factory=dict)
    fmt: dict[str, str] = field(default_factory=dict)
    code: str = ""

    @property
    def family_kind(self) -> str:
        """The kind a reader groups by: ``size`` and ``min_size`` are both "size", etc."""
        return {"min_size": "size", "min_rank": "rank", "bool_as_int": "scalar", "int64": "scalar",
                "meta_device": "device"}.get(self.kind, self.kind)

"""Valid calls of a contract, as a product supplies them: the data the error catalog and the tests start from.

An :class:`ExampleSet` holds a contract's valid calls (:class:`Variant`, each a builder of fresh keyword
arguments) and how a call is written. The search that mutates them into failing calls is development
tooling of the repository (``tools/counterexamples.py``), not part of the installed package; only these data
types, and :func:`unchecked` (which the catalog's example code imports), ship.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Call = dict[str, Any]

__all__ = ["Call", "ExampleSet", "Variant", "unchecked"]


@dataclass(frozen=True)
class Variant:
    """One valid call: ``build()`` returns fresh keyword arguments (exactly the contract's fields)."""

    name: str
    build: Callable[[], Call]
    note: str = ""


@dataclass(frozen=True)
class ExampleSet:
    """The valid calls of one contract, and how a call is written (``callee(**call, **extra)``)."""

    callee: str
    variants: tuple[Variant, ...]
    extra: Mapping[str, object] = field(default_factory=dict)


def unchecked(cls: type[Any], **fields: Any) -> Any:
    """An instance of ``cls`` built without running its ``__init__`` (so without its own checks)."""
    obj = object.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(obj, name, value)
    return obj

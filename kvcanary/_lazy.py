"""Lazy package namespaces (PEP 562): a package's public names are imported on first use, not with it.

A package lists its names once, as ordinary ``from module import name`` statements under
``if TYPE_CHECKING:``; type checkers read them as usual, and :func:`attach` reads the same statements from
the package's source to build the ``__getattr__`` and ``__dir__`` that import each name's module on first
use. So ``import kvcanary`` (and ``kvcanary --help``) costs no torch import until a name is touched.
"""

from __future__ import annotations

import ast
import importlib
import importlib.abc
import importlib.util
from collections.abc import Callable, Iterable


def imported_names(source: str) -> dict[str, str]:
    """Name -> module of every ``from module import name`` under ``if TYPE_CHECKING:`` in ``source``."""
    where: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                if isinstance(imp, ast.ImportFrom) and imp.module is not None:
                    where.update({alias.asname or alias.name: imp.module for alias in imp.names})
    return where


def attach(package: str, namespace: dict[str, object],
           public: Iterable[str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` (its ``globals()`` as ``namespace``).

    A listed name is imported from its module and kept in ``namespace``; any other name that is a submodule
    (``kvcanary.registry``) is imported as such; anything else is an ``AttributeError``.
    """
    public = tuple(public)
    where: dict[str, str] = {}

    def names() -> dict[str, str]:
        if not where:
            spec = importlib.util.find_spec(package)
            loader = spec.loader if spec is not None else None
            source = loader.get_source(package) if isinstance(loader, importlib.abc.InspectLoader) else None
            if source is None:  # pragma: no cover - a sourceless install
                raise ImportError(f"{package}: cannot read the package's source to resolve its names")
            where.update(imported_names(source))
        return where

    def getattr_(name: str) -> object:
        module = names().get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
            namespace[name] = value
            return value
        if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        return sorted({*namespace, *public})

    return getattr_, dir_

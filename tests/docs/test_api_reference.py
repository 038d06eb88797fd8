"""The API reference (docs/api/, "Reference > API" in the nav) has an entry for every public name of wave 3's
namespaces that the guides tell an integrator to call or build, and each entry names that very object. The
evidence namespace, the transformers integration and the journal's vocabulary (``Owner``, ``OwnerKind``,
``JournalKind``, ``JournalEvent``) had none, their signatures only in the prose (rD)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
NAMESPACES = ["kvcanary.guard", "kvcanary.monitor", "kvcanary.evidence", "kvcanary.serve",
              "kvcanary.integrations.transformers"]


def _guides() -> str:
    return "\n".join(p.read_text() for p in DOCS.rglob("*.md") if p.parent.name not in ("errors", "api"))


def _paths() -> list[str]:
    """Every ``module.Name`` of a ``::: module.Name`` line of the API pages."""
    return [m for p in sorted((DOCS / "api").glob("*.md"))
            for m in re.findall(r"^::: ([\w.]+)", p.read_text(), flags=re.M)]


def _entries() -> set[str]:
    """The last part of every ``::: module.Name`` of the API pages."""
    return {m.rsplit(".", 1)[-1] for m in _paths()}


def _resolve(path: str) -> object:
    """The object a ``::: path`` line documents: a module, or a name of its parent module."""
    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_every_public_name_the_guides_use_has_an_api_entry(namespace: str) -> None:
    guides, entries = _guides(), _entries()
    names = importlib.import_module(namespace).__all__
    used = [n for n in names if n.upper() != n and re.search(rf"\b{re.escape(n)}\b", guides)]  # constants aside
    assert used
    assert [n for n in used if n not in entries] == []
    exported = importlib.import_module(namespace)
    for path in _paths():  # an entry of the namespace's name documents the object the namespace exports
        name = path.rsplit(".", 1)[-1]
        if name in used:
            assert _resolve(path) is getattr(exported, name), path

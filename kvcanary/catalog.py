"""The error catalog and the contract export as the docs generator wrote them: what ``kvcanary explain`` and
``kvcanary contracts`` print.

The pages are built from the contracts by the repository's docs generator (``tools/docsgen``, which runs the
counterexample search); the installed package ships its output, ``catalog.json.gz`` beside this module, so
the commands need neither the generator nor torch. ``kvcanary docs`` rewrites the file in a checkout, and a
test fails when it drifts from the contracts.
"""

from __future__ import annotations

import functools
import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_PATH = Path(__file__).with_name("catalog.json.gz")
FORMAT = "kvcanary-catalog/1"


@dataclass(frozen=True)
class Page:
    """One code's page: as a terminal shows it (``text``) and as the site does (``markdown``)."""

    code: str
    text: str
    markdown: str


def encode(pages: Mapping[str, Page], contracts: Mapping[str, Any]) -> bytes:
    """The data file's bytes (gzip of sorted JSON, no time stamp: the same input gives the same bytes)."""
    data = {"format": FORMAT, "contracts": contracts,
            "pages": {code: {"text": p.text, "markdown": p.markdown} for code, p in sorted(pages.items())}}
    return gzip.compress(json.dumps(data, sort_keys=True, default=str).encode(), compresslevel=9, mtime=0)


def decode(raw: bytes) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(gzip.decompress(raw))
    if data.get("format") != FORMAT:
        raise ValueError(f"{DATA_PATH.name}: format {data.get('format')!r}, expected {FORMAT!r}")
    return data


@functools.cache
def _data() -> dict[str, Any]:
    return decode(DATA_PATH.read_bytes())


def page(code: str) -> Page | None:
    """The page of ``code`` (``KVC-W087``), or None when there is no such code."""
    entry = _data()["pages"].get(code)
    return None if entry is None else Page(code, entry["text"], entry["markdown"])


def codes() -> list[str]:
    """Every code that has a page, sorted."""
    return sorted(_data()["pages"])


def contracts() -> dict[str, Any]:
    """The contract export (``kvcanary contracts --json``): every contract's fields, rules and checks."""
    out: dict[str, Any] = _data()["contracts"]
    return out

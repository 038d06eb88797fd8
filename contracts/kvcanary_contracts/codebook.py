"""Stable error codes: a committed file maps each rule's identity to a short code that never changes.

A rule's identity is ``"<contract>/<slug>"`` (``launch_canary_verify_kernel/plan.enable:dtype``). New rules
get the next free number of their contract's letter when the book is updated; existing entries are never
renumbered, and a rule that disappears keeps its code in ``retired`` so the code is never reused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

_FORMAT = "contracts-codebook/1"


class CodeBook:
    """The mapping from rule identity to code, loaded from (and saved to) one JSON file."""

    def __init__(self, path: Path | str, prefix: str) -> None:
        self.path = Path(path)
        self.prefix = prefix
        self.codes: dict[str, str] = {}
        self.retired: dict[str, str] = {}
        if self.path.exists():
            data = json.loads(self.path.read_text())
            if data.get("format") != _FORMAT:
                raise ValueError(f"{self.path}: not a {_FORMAT} file")
            self.codes = dict(data.get("codes", {}))
            self.retired = dict(data.get("retired", {}))

    @staticmethod
    def key(contract: str, slug: str) -> str:
        return f"{contract}/{slug}"

    def lookup(self, contract: str, slug: str) -> str | None:
        return self.codes.get(self.key(contract, slug))

    def placeholder(self, letter: str) -> str:
        return f"{self.prefix}-{letter}???"

    def update(self, wanted: Iterable[tuple[str, str, str]]) -> list[str]:
        """Give a code to every ``(contract, slug, letter)`` that lacks one; retire vanished keys.

        Returns the keys that were added. Numbers continue after the highest ever used for the letter.
        """
        wanted = list(wanted)
        keys = {self.key(c, s) for c, s, _ in wanted}
        used: dict[str, int] = {}
        pattern = re.compile(rf"^{re.escape(self.prefix)}-([A-Z]+)(\d+)$")
        for code in (*self.codes.values(), *self.retired.values()):
            m = pattern.match(code)
            if m:
                used[m.group(1)] = max(used.get(m.group(1), 0), int(m.group(2)))
        for key in sorted(set(self.codes) - keys):
            self.retired[key] = self.codes.pop(key)
        added: list[str] = []
        for contract, slug, letter in wanted:
            key = self.key(contract, slug)
            if key in self.codes:
                continue
            if key in self.retired:  # a rule came back: it gets its old code
                self.codes[key] = self.retired.pop(key)
                continue
            used[letter] = used.get(letter, 0) + 1
            self.codes[key] = f"{self.prefix}-{letter}{used[letter]:03d}"
            added.append(key)
        return added

    def save(self) -> None:
        body = {
            "format": _FORMAT,
            "codes": dict(sorted(self.codes.items())),
            "retired": dict(sorted(self.retired.items())),
        }
        self.path.write_text(json.dumps(body, indent=1) + "\n")

    def by_code(self) -> Mapping[str, str]:
        return {code: key for key, code in self.codes.items()}

"""``kvcanary explain CODE``: print the catalog page of an error code (the pages ship with the package).

An unknown code gets the codes one typo away from it, if any, and the range of its letter: never a list of
codes that merely share its first letter.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from kvcanary.cli.parser import UsageError, arguments

_CODE = re.compile(r"KVC-([A-Z])(\d+)")


@arguments("explain")
def _explain_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("code", help="an error code such as KVC-W012 or W012 (the second line of every kvcanary error)")
    p.add_argument("--markdown", action="store_true", help="print the page as Markdown (as on the site)")


def normalize_code(text: str) -> str:
    """``w87``, ``W087``, ``kvc-w087`` -> ``KVC-W087`` (anything else is returned upper-cased)."""
    code = text.strip().upper()
    m = re.fullmatch(r"(?:KVC-?)?([A-Z])(\d{1,3})", code)
    return f"KVC-{m.group(1)}{int(m.group(2)):03d}" if m else code


def _one_edit_apart(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one character changed, added or removed."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b, strict=True)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def similar_codes(code: str, known: Sequence[str], limit: int = 5) -> list[str]:
    """The known codes one typo away from ``code`` (at most ``limit``), sorted."""
    return sorted(c for c in known if _one_edit_apart(code, c))[:limit]


def letter_range(code: str, known: Sequence[str]) -> str | None:
    """``KVC-W001..KVC-W133``: the codes of ``code``'s letter, when it is a known letter."""
    m = _CODE.fullmatch(code)
    same = sorted((c for c in known if m and c.startswith(f"KVC-{m.group(1)}")), key=lambda c: int(c[5:]))
    return f"{same[0]}..{same[-1]}" if same else None


def unknown_code(text: str, code: str, known: Sequence[str]) -> UsageError:
    """The error for a code with no page: the codes one typo away, or where its letter's codes run."""
    near = similar_codes(code, known)
    span = letter_range(code, known)
    detail = (f"; did you mean {', '.join(near)}?" if near
              else f"; its letter's codes run {span}" if span
              else "; codes look like KVC-W087 (the second line of every kvcanary error)")
    return UsageError(f"unknown error code {text!r}{detail}",
                      hint=f"{len(known)} codes have a page: `kvcanary contracts --codes` lists the contracts' codes, "
                           "the catalog index (docs/errors/index.md) every one")


def main(args: argparse.Namespace) -> int:
    from kvcanary import catalog

    code = normalize_code(args.code)
    page = catalog.page(code)
    if page is None:
        raise unknown_code(args.code, code, catalog.codes())
    print(page.markdown if args.markdown else page.text, end="")
    return 0

"""kvcanary's contract family: the ``kv-canary: `` prefix, the pointer line and the code book.

Every launcher contract in :mod:`kvcanary.ops` belongs to :data:`FAMILY`. The code book
(``codebook.json`` beside this file) gives each rule a stable ``KVC-<letter><nnn>`` code; run
``kvcanary docs --update-codes`` after adding a rule.
"""

from __future__ import annotations

from pathlib import Path

from kvcanary_contracts import CodeBook, ContractError, ContractTypeError, Family

CODEBOOK_PATH = Path(__file__).with_name("codebook.json")

FAMILY = Family(
    name="kvcanary",
    prefix="kv-canary: ",
    codebook=CodeBook(CODEBOOK_PATH, "KVC"),
    pointer="[{code}] {contract}: {summary}. Run `kvcanary explain {code}` for the full page.",
    allow_meta=False,  # a launch on meta tensors passes every shape check, then no kernel can run: refuse it
)

__all__ = ["CODEBOOK_PATH", "FAMILY", "ContractError", "ContractTypeError"]

"""ExpectedTokens: the host snapshot of each row's own token ids that VERIFY_TOKEN compares records with."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvcanary.constructors.expected_tokens import check_expected_tokens


@dataclass(frozen=True, kw_only=True)
class ExpectedTokens:
    """Host snapshot of each row's own token ids (``origin_input_ids + output_ids``), for VERIFY_TOKEN.

    ``flat``: int64 CPU ``[Σ lens]``, the rows' ids concatenated in row order; ``lens``: int64 CPU ``[bs]``
    (0 for padding rows). Taken on the host before the forward, so checking it costs no device sync. The
    rules (KVC-B codes) run at construction; the batch that holds it checks one length per row.
    """

    flat: torch.Tensor
    lens: torch.Tensor

    def __post_init__(self) -> None:
        check_expected_tokens(flat=self.flat, lens=self.lens)  # the rules: kvcanary/constructors/expected_tokens.py

    @classmethod
    def from_lists(cls, rows: list[list[int]]) -> ExpectedTokens:
        """From each row's token ids (an empty list for a padding row)."""
        flat = [t for r in rows for t in r]
        lens = [len(r) for r in rows]
        return cls(flat=torch.tensor(flat, dtype=torch.int64), lens=torch.tensor(lens, dtype=torch.int64))

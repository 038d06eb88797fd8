"""CanaryBatch: an engine-neutral description of one forward, as the canary needs it.

Rows: ``req_pool_indices`` (0 = padding row), ``prefix_lens`` (tokens already in the KV), ``extend_lens``
(tokens this forward writes). Tokens, flat and grouped by row in row order, padding rows last:
``input_ids``, ``positions`` and ``out_cache_loc`` (full-pool slot; -1 = not written). Any engine's forward
modes map onto it (decode: extend 1; target verify: extend = draft tokens; draft extend: prefix = seq - extend).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from kvcanary.manager.expected import ExpectedTokens
from kvcanary_contracts import Checker

__all__ = ["CanaryBatch", "ExpectedTokens"]



@functools.cache
def _batch_check() -> Checker:
    """``CanaryBatch``'s checker, imported on first use: its contract's module imports this package."""
    from kvcanary.constructors.batch import check_canary_batch

    return check_canary_batch


@functools.cache
def _device_check() -> Checker:
    """``CanaryBatch.validate``'s checker, imported on first use: its contract names this module's class."""
    from kvcanary.constructors.batch_device import check_batch_device

    return check_batch_device


@dataclass(frozen=True, kw_only=True)
class CanaryBatch:
    """One forward. ``expected_tokens`` is required when the manager checks VERIFY_TOKEN;
    ``expected_input_tokens`` / ``expected_input_positions`` (an oracle's, per flat token) when it runs the
    write-time input assert."""

    req_pool_indices: torch.Tensor
    prefix_lens: torch.Tensor
    extend_lens: torch.Tensor
    input_ids: torch.Tensor
    positions: torch.Tensor
    out_cache_loc: torch.Tensor
    expected_tokens: ExpectedTokens | None = None
    expected_input_tokens: torch.Tensor | None = None
    expected_input_positions: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self.check_rules()

    def check_rules(self) -> None:
        """Run the batch's own rules (they run when it is built); again after a tensor was resized in place."""
        _batch_check()(req_pool_indices=self.req_pool_indices, prefix_lens=self.prefix_lens,
                       extend_lens=self.extend_lens, input_ids=self.input_ids, positions=self.positions,
                       out_cache_loc=self.out_cache_loc, expected_tokens=self.expected_tokens,
                       expected_input_tokens=self.expected_input_tokens,
                       expected_input_positions=self.expected_input_positions)  # kvcanary/constructors/batch.py

    @property
    def batch_size(self) -> int:
        """Request rows of the forward, padding rows included."""
        return int(self.req_pool_indices.shape[0])

    @property
    def num_tokens(self) -> int:
        """Tokens of the forward (the flat token arrays' length)."""
        return int(self.input_ids.shape[0])

    def validate(self, device: torch.device) -> None:
        """That the batch is on the pool's ``device`` (its own rules ran when it was built): no device read."""
        _device_check()(self=self, device=device)  # kvcanary/constructors/batch_device.py

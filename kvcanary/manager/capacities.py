"""CanaryCapacities: the sizes every manager buffer is allocated with, once, at attach time.

The per-forward path never allocates and never resizes: a batch larger than a capacity is refused on the
host (before anything is launched) with a message saying which engine setting to raise.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcanary.constructors.capacities import check_from_engine, validate_capacities
from kvcanary_contracts import Checker

if TYPE_CHECKING:
    from kvcanary.manager.batch import CanaryBatch


@dataclass(frozen=True, kw_only=True)
class CanaryCapacities:
    """``verify_capacity``: verify entries per forward (Σ prefix tokens, more than the pool under prefix
    sharing; overflow skips the verify, it never corrupts); ``write_req_capacity``: request rows per forward
    (CUDA-graph padding included); ``write_token_capacity``: tokens per forward; ``sweep_capacity``: cached
    slots per sweep; ``expected_token_capacity``: tokens of the expected-token snapshot per forward."""

    verify_capacity: int
    write_req_capacity: int
    write_token_capacity: int
    sweep_capacity: int
    expected_token_capacity: int = 1

    def __post_init__(self) -> None:
        validate_capacities(self)  # the rules: kvcanary/constructors/capacities.py

    def check_batch(self, batch: CanaryBatch, *, enable_verify_token: bool) -> None:
        """That ``batch`` fits these capacities (rows, tokens, and with ``enable_verify_token`` its
        expected-token snapshot, which it must then carry); SGLang's RuntimeError texts, with their codes."""
        _fits_check()(self=self, batch=batch, enable_verify_token=enable_verify_token)  # constructors/manager.py

    @classmethod
    def from_engine(
        cls,
        *,
        pool_slot_count: int,
        max_batch_size: int,
        req_rows: int,
        max_tokens_per_forward: int,
        max_context_len: int,
        spec_num_draft_tokens: int = 0,
    ) -> CanaryCapacities:
        """SGLang's sizing (``CanaryLaunchCapacities.from_args``): verify 3x the pool (prefix sharing lets
        Σ prefix_lens exceed it), one write row per request row or graph row, tokens for the largest of a
        decode/verify batch and a prefill chunk; the sweep covers the whole pool."""
        check_from_engine(pool_slot_count=pool_slot_count, max_batch_size=max_batch_size, req_rows=req_rows,
                          max_tokens_per_forward=max_tokens_per_forward, max_context_len=max_context_len,
                          spec_num_draft_tokens=spec_num_draft_tokens)
        write_reqs = max(max_batch_size, req_rows)
        return cls(
            verify_capacity=pool_slot_count * 3,
            write_req_capacity=write_reqs,
            write_token_capacity=max(max_batch_size * max(1, spec_num_draft_tokens + 1), max_tokens_per_forward),
            sweep_capacity=pool_slot_count,
            expected_token_capacity=write_reqs * max_context_len,
        )


@functools.cache
def _fits_check() -> Checker:
    """``CanaryCapacities.check_batch``'s checker, imported on first use: its contract names this class."""
    from kvcanary.constructors.manager import check_batch_fits

    return check_batch_fits

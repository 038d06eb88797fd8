"""A world whose ``build`` hands the previous batch object again, refilled in place, while the shapes hold: what
an engine that stages each step into fixed buffers does, and what the transformers integration's map does."""

from __future__ import annotations

from typing import Any

import torch

from kvcanary.manager import CanaryBatch
from tests.manager.graph_parity import device_buffers, differences
from tests.manager.world import World


class ReusedBatches:
    """Makes ``w.build`` return the kept batch object, its :meth:`refilled` tensors copied in from the new batch,
    whenever both have as many rows and those tensors have the kept one's shapes; else :meth:`keep`'s batch,
    kept for the next forward. ``reused`` counts the batches handed again."""

    def __init__(self, w: World) -> None:
        self.kept: CanaryBatch | None = None
        self.reused = 0
        self._build = w.build
        w.build = self.build  # type: ignore[method-assign]

    @staticmethod
    def refilled(b: CanaryBatch) -> list[torch.Tensor]:
        """The tensors whose values are copied into the kept batch (each batch's own, in one order)."""
        assert b.expected_tokens is not None
        return [b.req_pool_indices, b.prefix_lens, b.extend_lens, b.input_ids, b.positions, b.out_cache_loc,
                b.expected_tokens.flat, b.expected_tokens.lens]

    def keep(self, fresh: CanaryBatch) -> CanaryBatch:
        """The batch kept when ``fresh`` cannot be refilled into the kept one: ``fresh`` itself."""
        return fresh

    def build(self, *a: Any, **k: Any) -> CanaryBatch:
        return self.reuse(self._build(*a, **k))

    def reuse(self, fresh: CanaryBatch) -> CanaryBatch:
        """The kept batch refilled with ``fresh``'s values where it fits, else a newly kept one."""
        kept = self.kept
        if kept is not None and kept.batch_size == fresh.batch_size and \
                [t.shape for t in self.refilled(kept)] == [t.shape for t in self.refilled(fresh)]:
            for dst, src in zip(self.refilled(kept), self.refilled(fresh), strict=True):
                dst.copy_(src)
            self.reused += 1
            return kept
        self.kept = self.keep(fresh)
        return self.kept


def same_as_fresh(w: World, fresh: World) -> None:
    """After both flush: ``w`` (handed reused batches) ends as ``fresh`` (fresh batches) does, byte for byte in
    every device buffer, event for event, launch count for launch count; ``fresh`` must have found the flip."""
    w.manager.flush()
    fresh.manager.flush()
    assert fresh.manager.events, "the flip must show"
    assert differences(device_buffers(w.manager), device_buffers(fresh.manager)) == []
    assert [e.violation for e in w.manager.events] == [e.violation for e in fresh.manager.events]
    assert w.manager.health.issued == fresh.manager.health.issued

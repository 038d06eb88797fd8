"""Running forwards: a model with the KV it reads and writes and the canary around it, and the runner that
builds each batch (graph-padded for decode) and launches the canary's checks around the model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvcanary.demo.engine.faults import FaultInjector
from kvcanary.demo.engine.forward_batch import Forward, GraphInputs, RowWork, build_forward
from kvcanary.demo.engine.model import KvAccess, TinyTransformer
from kvcanary.manager import CanaryManager


@dataclass(frozen=True)
class ModelPass:
    """What one forward runs through: the model, its KV pool access, the canary manager of that pool
    (None: no canary)."""

    model: TinyTransformer
    kv: KvAccess
    canary: CanaryManager | None


class ForwardRunner:
    """Builds and runs one engine's forwards; decode batches are padded to a graph bucket and use the
    captured graphs' static inputs (``tokens_per_row`` tokens per padded row at most)."""

    def __init__(self, device: torch.device, *, buckets: tuple[int, ...], tokens_per_row: int,
                 faults: FaultInjector) -> None:
        self.device = device
        self.buckets = buckets
        self.faults = faults
        self.graph = GraphInputs(max(buckets) * tokens_per_row, device) if buckets else None
        self.forwards = 0
        self.observer: Callable[[Forward], None] | None = None
        """Called with each forward before it runs (the isolate policy's journal)."""

    def build(self, rows: list[RowWork], *, padded: bool = False) -> Forward:
        """One forward of ``rows``; ``padded``: a decode batch, replayed from a graph."""
        if padded:
            return build_forward(rows, device=self.device, buckets=self.buckets, graph=self.graph,
                                 faults=self.faults)
        return build_forward(rows, device=self.device)

    def run(self, fwd: Forward, on: ModelPass, slot: int) -> torch.Tensor:
        """The model's forward between the canary's prepare + HEAD and TAIL launches (forward slot
        ``slot``); the logits."""
        mgr = on.canary
        if self.observer is not None:
            self.observer(fwd)
        if mgr is not None:
            mgr.prepare(fwd.canary, forward_index=slot)
        try:
            if mgr is not None:
                mgr.head(fwd.canary, forward_index=slot)
            logits = on.model.forward(fwd.model_input, on.kv)
            if mgr is not None:
                mgr.tail(forward_index=slot)
        except BaseException:  # the HEAD, the model or the TAIL raised: the manager forgets the forward
            if mgr is not None:
                mgr.abort_forward(forward_index=slot)
            raise
        self.forwards += 1
        return logits

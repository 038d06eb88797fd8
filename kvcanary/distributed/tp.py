"""Tensor parallelism: each rank runs its own canary over its own heads' KV; ranks compare digests.

Every TP rank stamps the same (token, position, prev_hash) at the same slots: only the real-KV fingerprint
differs (each rank hashes its own heads). :class:`TensorParallelCanary` adds to a rank's
:class:`~kvcanary.manager.CanaryManager` a per-forward digest of the records the HEAD wrote (device ops
only, capturable), and per step an asynchronous all_gather of (digest, violation total) that is compared
when finished (see :mod:`kvcanary.distributed.exchange`). A rank whose records diverge is named. Each rank's
ring is pumped as usual; :meth:`TensorParallelCanary.flush` gathers every rank's reports (end of run).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.distributed as dist

from kvcanary.consts import PoolKind
from kvcanary.distributed.digest import DigestAccumulator
from kvcanary.distributed.exchange import DIGEST_WIDTH, DigestExchange, RankDivergence
from kvcanary.manager import CanaryBatch, CanaryManager, StepStats

logger = logging.getLogger("kvcanary.distributed")


@dataclass(frozen=True)
class RankSummary:
    """One rank's own findings: its violation total and each report's text."""

    rank: int
    total_violations: int
    messages: tuple[str, ...]


@dataclass(frozen=True)
class TpReport:
    """Every rank's summary (indexed by rank) and the divergences the digests showed."""

    ranks: tuple[RankSummary, ...]
    divergences: tuple[RankDivergence, ...]

    @property
    def diverging_ranks(self) -> list[int]:
        return sorted({r for d in self.divergences for r in d.ranks})

    @property
    def ranks_with_violations(self) -> list[int]:
        return [s.rank for s in self.ranks if s.total_violations]

    @property
    def clean(self) -> bool:
        return not self.divergences and not self.ranks_with_violations

    def lines(self) -> list[str]:
        out = [d.message() for d in self.divergences]
        for s in self.ranks:
            out += [f"[rank {s.rank}] {m}" for m in s.messages]
        return out


class TensorParallelCanary:
    """Wraps one rank's manager. Per forward nothing changes for the engine (the digest hooks the manager's
    HEAD); per step call :meth:`end_step` instead of ``manager.end_step()`` (or :meth:`after_step` after
    it, when the engine calls ``end_step`` itself). ``fused`` picks the digest's implementation (default: one
    fused Triton launch on CUDA devices, torch ops elsewhere; see :func:`kvcanary.distributed.digest.fused_fold`)."""

    def __init__(self, manager: CanaryManager, *, group: dist.ProcessGroup | None = None,
                 fused: bool | None = None) -> None:
        full = next(g for g in manager.groups if g.kind is PoolKind.FULL)
        self.manager = manager
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.digest = DigestAccumulator(full.k_head, fused=fused)
        self.exchange = DigestExchange(device=manager.device, group=group)
        self._contrib = torch.zeros(DIGEST_WIDTH, dtype=torch.int64, device=manager.device)
        manager.add_head_observer(self._observe)

    def _observe(self, batch: CanaryBatch) -> None:
        self.digest.add(batch.out_cache_loc)

    def after_step(self, step: int) -> list[RankDivergence]:
        """Outside any graph, once per step: start this step's exchange, compare the finished ones (no
        blocking); log each new divergence as an error and return them. A collective: every rank of the
        group calls it once per step, in step order."""
        self.digest.take(self._contrib)
        self._contrib[2:3].copy_(self.manager.state.log.violation_write_index)
        self.exchange.start(step, self._contrib.clone())
        seen = len(self.exchange.violation_alerts)
        new = self._log(self.exchange.poll())
        if self.rank == 0:
            for s, r, total in self.exchange.violation_alerts[seen:]:
                logger.warning("kv-canary: rank %d reports %d violation(s) as of step %d (its own log has them)",
                               r, total, s)
        return new

    def end_step(self) -> StepStats:
        """``manager.end_step()`` then :meth:`after_step` for that step."""
        stats = self.manager.end_step()
        self.after_step(self.manager.step - 1)
        return stats

    @staticmethod
    def _log(new: list[RankDivergence]) -> list[RankDivergence]:
        for d in new:
            logger.error(d.message())
        return new

    @property
    def divergences(self) -> list[RankDivergence]:
        return self.exchange.divergences

    def flush(self) -> TpReport:
        """End of run (a collective: every rank calls it): drain this rank's ring and the pending
        exchanges, then gather every rank's summary to every rank."""
        self.manager.flush()
        self._log(self.exchange.drain())
        mine = RankSummary(self.rank, self.manager.total_violations,
                           tuple(e.message for e in self.manager.events))
        every: list[RankSummary | None] = [None] * self.world_size
        dist.all_gather_object(every, mine, group=self.group)
        return TpReport(tuple(s for s in every if s is not None), tuple(self.exchange.divergences))

"""Cross-rank comparison of per-step digests: an asynchronous all_gather, read when it has finished.

Each step a rank contributes ``[digest_sum, digest_count, violations_so_far]`` (int64, on its device). The
all_gather is started with ``async_op=True`` outside any captured graph (no collective is captured: gloo
cannot be, and the digest is only taken once per step anyway). :meth:`DigestExchange.poll` never blocks:
it looks at gathers that have completed (``Work.is_completed()``), copies the result to the host
(asynchronously on a GPU, read at a later poll) and compares the ranks. :meth:`drain` waits (end of run).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
import torch.distributed as dist

DIGEST_WIDTH = 3
"""int64 per rank and step: digest sum, digest count, the rank's violation total (its ring write index)."""


@dataclass(frozen=True)
class RankDivergence:
    """At ``step`` the records of ``ranks`` differ from ``reference``'s digest.

    ``reference`` is "majority" when more than half of the ranks agree; without a majority (two ranks) it
    is "ranks without violations" when the ranks whose own rings are clean agree, else "rank 0"."""

    step: int
    ranks: tuple[int, ...]
    reference: str
    digests: tuple[tuple[int, int], ...]

    def message(self) -> str:
        who = ", ".join(f"rank {r}" for r in self.ranks)
        verb = "differs" if len(self.ranks) == 1 else "differ"
        ref = self.reference if self.reference == "rank 0" else f"the {self.reference}"
        return (f"kv-canary: tensor-parallel records diverge at step {self.step}: {who} {verb} from {ref} "
                f"(per-rank (digest, count): {list(self.digests)})")


def compare(step: int, rows: list[tuple[int, ...]]) -> RankDivergence | None:
    """The ranks whose (sum, count) differs from the reference: the majority's digest; without a strict
    majority, the digest the ranks with no violation of their own share (when they all share one), else
    rank 0's."""
    keys = [(r[0], r[1]) for r in rows]
    top, n = Counter(keys).most_common(1)[0]
    clean = [i for i, r in enumerate(rows) if r[2] == 0]
    if n * 2 > len(keys):
        ref, label = top, "majority"
    elif clean and len(clean) < len(rows) and len({keys[i] for i in clean}) == 1:
        ref, label = keys[clean[0]], "ranks without violations"
    else:
        ref, label = keys[0], "rank 0"
    bad = tuple(i for i, k in enumerate(keys) if k != ref)
    return RankDivergence(step, bad, label, tuple(keys)) if bad else None


@dataclass
class _Pending:
    step: int
    work: dist.Work | None
    gathered: list[torch.Tensor]
    host: torch.Tensor | None = None
    event: torch.cuda.Event | None = None


class DigestExchange:
    """Starts one all_gather per step and compares finished ones; see the module docstring."""

    def __init__(self, *, device: torch.device, group: dist.ProcessGroup | None = None) -> None:
        self.device = device
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self._pending: list[_Pending] = []
        self.divergences: list[RankDivergence] = []
        self.rank_violations = [0] * self.world_size
        """Each rank's violation total, as of the newest compared step."""
        self.compared_steps = 0
        self.violation_alerts: list[tuple[int, int, int]] = []
        """(step, rank, total) each time a rank's violation total grew, as seen through the exchange."""

    def start(self, step: int, contribution: torch.Tensor) -> None:
        """Launch the all_gather of ``contribution`` (int64 [DIGEST_WIDTH] on the device); returns at once."""
        gathered = [torch.empty_like(contribution) for _ in range(self.world_size)]
        work = dist.all_gather(gathered, contribution, group=self.group, async_op=True)
        self._pending.append(_Pending(step, work, gathered))

    def poll(self) -> list[RankDivergence]:
        """Compare every gather that has finished, in step order, without blocking; return new divergences."""
        return self._advance(block=False)

    def drain(self) -> list[RankDivergence]:
        """Wait for every pending gather and compare it (end of run)."""
        return self._advance(block=True)

    def _advance(self, *, block: bool) -> list[RankDivergence]:
        new: list[RankDivergence] = []
        while self._pending:
            p = self._pending[0]
            if p.host is None:
                assert p.work is not None
                if not block and not p.work.is_completed():
                    break
                p.work.wait()
                stacked = torch.stack(p.gathered)
                if stacked.device.type == "cuda":
                    p.host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
                    p.host.copy_(stacked, non_blocking=True)
                    p.event = torch.cuda.Event()  # type: ignore[no-untyped-call]
                    p.event.record()
                else:
                    p.host = stacked
            if p.event is not None:
                if not block and not p.event.query():  # type: ignore[no-untyped-call]
                    break
                p.event.synchronize()
            self._pending.pop(0)
            rows = [tuple(int(x) for x in r) for r in p.host.tolist()]
            totals = [r[2] for r in rows]
            self.violation_alerts += [(p.step, i, t) for i, (t, old) in enumerate(zip(totals, self.rank_violations,
                                                                                      strict=True)) if t > old]
            self.rank_violations = totals
            self.compared_steps += 1
            d = compare(p.step, rows)
            if d is not None:
                new.append(d)
        self.divergences += new
        return new

"""What :class:`TfGuard` uses of a manager, a paged cache and transformers' batch processor, as small fakes:
its journal feed and its decisions run without a model (unit tests of the guard's own bookkeeping)."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

from kvcanary.guard import GuardDecision, GuardSink, RequestFailure, SlotJournal, ViolationPolicy
from kvcanary.guard.followup import followup_decision
from kvcanary.integrations.transformers.guard import TfGuard
from kvcanary.manager import CanaryConfig


class FakeManager:
    """The step, the journals, the config (its ``guard_history``) and the sinks of a manager."""

    def __init__(self, guard_history: int | None = None) -> None:
        self.step = 0
        self.journal = SlotJournal(block_size=1, capacity=64)
        self.swa_journal = SlotJournal(block_size=1, capacity=64)
        self.config = CanaryConfig(on_violation=ViolationPolicy.ISOLATE, guard_history=guard_history)
        self.sinks: list[GuardSink] = []

    def set_adapter(self, adapter: object, *, block_size: int, swa_block_size: int | None) -> None:
        pass

    def report_failures(self, failures: Sequence[RequestFailure], *, step: int) -> None:
        """As the manager's, outside a decision's ``apply``: the sinks hear the follow-up decision at once."""
        decision = followup_decision(failures, step)
        if decision.fail:
            for sink in self.sinks:
                sink.on_decision(decision)


class FakeProcessor:
    """What :meth:`TfGuard.carry_out` uses of transformers' batch processor, for active requests only."""

    def __init__(self, active: list[str]) -> None:
        self.scheduler = SimpleNamespace(active_requests={r: object() for r in active}, waiting_requests={},
                                         finish_request=lambda rid: None)
        self.errors: list[str] = []

    def _handle_request_error(self, error: Exception, state: object) -> None:
        self.errors.append(str(error))


def failure(rid: str) -> RequestFailure:
    """A verify failure of ``rid`` (slot 4)."""
    return RequestFailure(request_id=rid, code="KVC-G001", check="verify", slot=4, position=0, fail_reasons=(),
                          step=0, message=f"{rid} failed")


class GuardRig:
    """A :class:`TfGuard` over the fakes (no sliding group, 4-token blocks); :meth:`step` feeds it one step."""

    def __init__(self, guard_history: int | None = None) -> None:
        self.manager = FakeManager(guard_history)
        block_manager = SimpleNamespace(_id_to_block={}, _hash_to_id={}, _uninit_block_ids=[])
        self.layout = SimpleNamespace(cache=SimpleNamespace(_block_manager=block_manager), stride=4, sliding=None,
                                      page=4, block_table={}, cached_blocks=lambda: [])
        self.rows = SimpleNamespace(changes=[])
        self.guard = TfGuard(cast(Any, self.manager), cast(Any, self.layout), cast(Any, self.rows))

    def step(self, changes: list[tuple[str, list[int] | None]], running: list[str]) -> None:
        """A new step: ``changes`` (request id, its blocks; None: it left), ``running`` in the step."""
        self.manager.step += 1
        self.layout.block_table = {rid: blocks for rid, blocks in changes if blocks is not None}
        self.rows.changes = list(changes)
        self.guard.observe(running, [0] * len(running), [4] * len(running))

    def fail(self, rids: list[str], *, active: list[str] | None = None) -> None:
        """A decision failing ``rids``, carried out with ``active`` (default: ``rids``) still running."""
        self.guard.apply(GuardDecision(step=self.manager.step, events=(), fail=tuple(failure(r) for r in rids)))
        self.guard.carry_out(FakeProcessor(rids if active is None else active))

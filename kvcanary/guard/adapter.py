"""The engine adapter protocol: what an engine implements so the guard can act on its requests and blocks.

An engine other than those in this repository implements these few methods; nothing else of kvcanary's
internals is needed. The manager calls :meth:`EngineAdapter.apply` once per step that has a non-empty
decision, on the host, between steps.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from kvcanary.guard.decision import GuardDecision


@runtime_checkable
class EngineAdapter(Protocol):
    """Carries out the guard's decisions in the engine."""

    def apply(self, decision: GuardDecision) -> None:
        """Fail ``decision.fail`` (each with its structured error; the rest of the batch keeps running) and
        quarantine ``decision.quarantine``: never hand those blocks out again until their records are
        rewritten, and drop them from any prefix cache so no later request reuses them. A request it fails on its
        own (one holding a quarantined block: ``KVC-G004``) goes to the sinks through
        ``manager.report_failures`` (:func:`~kvcanary.guard.followup.quarantined_failure`), or no monitor
        counts it."""
        ...

"""What an engine adapter tells the sinks of the requests it failed on its own.

Carrying out a decision, an adapter also fails every other request that holds a block the decision
quarantined (``KVC-G004``): its KV there cannot be trusted, and the block leaves service. No decision names
those requests, so the adapter reports them (:meth:`CanaryManager.report_failures`) as a follow-up decision
of only those failures: no violations, no blocks. The monitor then counts every request failed (health,
``kvcanary_requests_failed_total``, one JSON ``isolation`` event), as the guards' bounded records promise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from kvcanary.guard.codes import QUARANTINED, quarantined_message
from kvcanary.guard.decision import GuardDecision, RequestFailure

__all__ = ["FOLLOWUP_NOTE", "QUARANTINE_CHECK", "followup_decision", "quarantined_failure"]

QUARANTINE_CHECK = "quarantine"
"""The ``check`` of a ``KVC-G004`` failure: the guard's quarantine, not one of the canary's checks."""
FOLLOWUP_NOTE = "requests the engine failed for holding a quarantined block (KVC-G004)"
"""The note of a follow-up decision (its JSON event's ``notes``)."""


def quarantined_failure(request_id: str, what: str, ids: Sequence[int], *, slot: int, step: int) -> RequestFailure:
    """The structured error of ``request_id``, failed because it holds quarantined ``what`` (``slot(s)``,
    ``block(s)``, ``ring block(s)``) ``ids``: ``slot`` is the first slot of the lowest of them, the position
    -1 (the request read nothing found corrupt), ``step`` the step of the decision that quarantined them."""
    return RequestFailure(request_id=request_id, code=QUARANTINED.code, check=QUARANTINE_CHECK, slot=slot,
                          position=-1, fail_reasons=(), step=step,
                          message=quarantined_message(request_id, what, list(ids)), alias=QUARANTINED.alias)


def followup_decision(failures: object, step: object) -> GuardDecision:
    """The decision of only ``failures`` (a sequence of :class:`RequestFailure`, each request once) at ``step``
    (an int), with :data:`FOLLOWUP_NOTE`. A value of another type is a TypeError naming the argument; a request
    named twice, a ValueError naming it."""
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"kv-canary: report_failures: step must be an int (the step of the decision whose "
                        f"quarantine failed them), got {type(step).__name__} {step!r}")
    if isinstance(failures, (str, bytes)) or not isinstance(failures, Sequence):
        raise TypeError(f"kv-canary: report_failures: failures must be a sequence of RequestFailure, got "
                        f"{type(failures).__name__} {failures!r}")
    bad = [f for f in failures if not isinstance(f, RequestFailure)]
    if bad:
        raise TypeError(f"kv-canary: report_failures: failures must be RequestFailure items, got "
                        f"{type(bad[0]).__name__} {bad[0]!r}")
    ids = [f.request_id for f in failures]
    if len(set(ids)) != len(ids):  # the monitor counts len(fail): one request twice would be two failures
        twice = sorted(i for i, n in Counter(ids).items() if n > 1)
        raise ValueError(f"kv-canary: report_failures: failures must name each request once (a request fails "
                         f"once), got {', '.join(map(repr, twice))} more than once")
    return GuardDecision(step=step, events=(), fail=tuple(failures), notes=(FOLLOWUP_NOTE,))

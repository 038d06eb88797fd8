"""The guard around the detector: who held a slot (the journal), what to do about a violation (the
policy's decision, carried out by the engine's adapter), and who hears about it (sinks).

Everything here is host-side and engine-neutral. The manager maps each violation row to the owners the
journal names, asks the policy for one decision per step, hands it to the engine's :class:`EngineAdapter`
and to every :class:`GuardSink`; the sinks derive what they report from the rows and the journal alone.
"""

from kvcanary.guard.adapter import EngineAdapter
from kvcanary.guard.codes import FailureCode, failure_codes
from kvcanary.guard.decision import FinishedRequest, GuardDecision, RequestFailure
from kvcanary.guard.history import DEFAULT_GUARD_HISTORY, History, HistoryMap
from kvcanary.guard.journal import JournalEvent, JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.guard.policy import FAILURE_CODES, Isolation, ViolationPolicy, failure_code
from kvcanary.guard.sink import GuardSink

__all__ = [
    "DEFAULT_GUARD_HISTORY",
    "FAILURE_CODES",
    "EngineAdapter",
    "FailureCode",
    "FinishedRequest",
    "GuardDecision",
    "GuardSink",
    "History",
    "HistoryMap",
    "Isolation",
    "JournalEvent",
    "JournalKind",
    "Owner",
    "OwnerKind",
    "RequestFailure",
    "SlotJournal",
    "ViolationPolicy",
    "failure_code",
    "failure_codes",
]

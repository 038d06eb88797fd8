"""Structured events: every violation and every isolation decision as one JSON object, through ``logging``.

:class:`EventSink` logs each on the ``kvcanary.events`` logger (WARNING for a violation or a decision that
fails requests): the record's message is the JSON text itself, and the dict rides along as the record's
``kvcanary_event`` attribute. :class:`JsonFormatter` renders any record as one JSON line (the event's fields
at the top level for kvcanary's records), so a log pipeline parses them without regular expressions. The
layout is versioned by :data:`EVENT_SCHEMA` (docs/monitoring.md, "JSON events"). The one-line report of
:func:`kvcanary.violations.format_violation` is unchanged; these events come beside it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from kvcanary.consts import FailReason
from kvcanary.guard.decision import GuardDecision
from kvcanary.manager.reporter import ViolationEvent
from kvcanary.manager.stats import StepStats
from kvcanary.violations import canary_kind

EVENT_SCHEMA = "kvcanary.event/1"
"""The events' layout version: fields are only ever added under it; a rename or removal bumps it."""

VIOLATION_CODE = "kv_canary_violation"
"""The ``code`` of a violation event (an isolation event carries each failed request's own code)."""

EVENT_LOGGER = "kvcanary.events"

Owners = Callable[[ViolationEvent], Sequence[str]]
"""Maps a violation to the engine request ids that held its slot (an engine integration provides it)."""


def check_owners(owners: object, where: str) -> None:
    """Refuse an ``owners`` resolver that cannot be called (each violation would log a traceback instead of
    the request ids); ``where`` names the constructor."""
    if owners is not None and not callable(owners):
        raise TypeError(f"kv-canary: {where}: owners must be a callable (a ViolationEvent to the request ids "
                        f"that held its slot) or None, got {type(owners).__name__} {owners!r}")


def _hex(x: int) -> str:
    return f"{x:#018x}"


def violation_event(e: ViolationEvent, *, request_ids: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON object of one violation: where (step, slot, position, launch tag, check), why (fail reason
    names and bits), what the record held and what was expected, and who held the slot."""
    v = e.violation
    out: dict[str, Any] = {
        "schema": EVENT_SCHEMA, "event": "violation", "code": VIOLATION_CODE,
        "step": e.step_recorded, "step_reported": e.step_pumped, "ring_index": e.ring_index,
        "request_ids": list(request_ids), "slot": v.slot_idx, "position": v.position,
        "launch_tag": v.tag_name, "check": canary_kind(v.kernel_kind),
        "fail_reasons": [r.name for r in FailReason if v.fail_reason_bits & r],
        "fail_reason_labels": v.reason_labels, "fail_reason_bits": v.fail_reason_bits,
        "stored": {"token": v.stored_token, "position": v.position, "chain_hash": _hex(v.stored_chain_hash)},
    }
    if v.is_write_row:  # a write-input assert: expected_aux holds the expected position
        aux = v.expected_aux - (1 << 64) if v.expected_aux >= (1 << 63) else v.expected_aux
        out["expected"] = {"token": v.expected_token, "position": aux}
    else:
        out["expected"] = {"token": v.expected_token, "chain_hash": _hex(v.expected_aux)}
    return out


def decision_event(d: GuardDecision) -> dict[str, Any]:
    """The JSON object of one isolation decision: the requests failed (each with its structured error), the
    blocks quarantined (the full-attention pool's and the sliding-window pool's, each in a field of its own:
    their block ids are spaces of their own), the requests that had already finished, and the violations behind
    them."""
    return {
        "schema": EVENT_SCHEMA, "event": "isolation", "step": d.step,
        "request_ids": [f.request_id for f in d.fail],
        "failed": [{"request_id": f.request_id, "code": f.code, "alias": f.alias, "check": f.check, "slot": f.slot,
                    "position": f.position, "fail_reasons": list(f.fail_reasons), "step": f.step,
                    "message": f.message} for f in d.fail],
        "quarantined_blocks": list(d.quarantine),
        "quarantined_blocks_swa": list(d.quarantine_swa),
        "finished": [{"request_id": f.request_id, "finished_step": f.finished_step} for f in d.finished],
        "violations": [{"slot": e.violation.slot_idx, "position": e.violation.position,
                        "launch_tag": e.violation.tag_name, "step": e.step_recorded} for e in d.events],
        "notes": list(d.notes),
    }


class EventSink:
    """A :class:`~kvcanary.guard.GuardSink` that logs each violation and each non-empty decision as one JSON
    event on ``logger`` (default ``kvcanary.events``). ``owners`` names the requests of a violation's slot.
    Nothing happens per step."""

    def __init__(self, *, owners: Owners | None = None, logger: logging.Logger | None = None) -> None:
        check_owners(owners, "EventSink")
        if logger is not None and not isinstance(logger, logging.Logger):
            raise TypeError("kv-canary: EventSink: logger must be a logging.Logger or None (logging.getLogger(name) "
                            f"for a name), got {type(logger).__name__} {logger!r}")
        self.owners = owners
        self.logger = logger or logging.getLogger(EVENT_LOGGER)

    def emit(self, event: dict[str, Any], level: int = logging.WARNING) -> None:
        """Log ``event``: the message is its JSON text, ``record.kvcanary_event`` the dict."""
        if self.logger.isEnabledFor(level):
            self.logger.log(level, json.dumps(event, sort_keys=False), extra={"kvcanary_event": event})

    def on_violations(self, events: Sequence[ViolationEvent]) -> None:
        for e in events:
            rids: Sequence[str] = ()
            if self.owners is not None:
                try:
                    rids = self.owners(e)
                except Exception:  # a resolver must not lose the event
                    self.logger.exception("kv-canary: the owners resolver failed for slot %d", e.violation.slot_idx)
            self.emit(violation_event(e, request_ids=rids))

    def on_decision(self, decision: GuardDecision) -> None:
        if not decision.empty:
            self.emit(decision_event(decision), logging.WARNING if decision.fail else logging.INFO)

    def on_step(self, stats: StepStats) -> None:
        pass


_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (UTC, ISO 8601), ``level``, ``logger``, then a kvcanary event's
    fields at the top level, or ``message`` for any other record (with ``exc_info`` as ``exception``)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name,
        }
        event = getattr(record, "kvcanary_event", None)
        if isinstance(event, dict):
            out.update(event)
        else:
            out["message"] = record.getMessage()
            out.update({k: v for k, v in record.__dict__.items() if k not in _RESERVED and _jsonable(v)})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def _jsonable(v: object) -> bool:
    return isinstance(v, (str, int, float, bool, type(None), list, dict))

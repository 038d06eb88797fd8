"""The violation policies (``log``, ``raise``, ``isolate``) and the isolation decision.

``log`` and ``raise`` are what :class:`~kvcanary.consts.CanaryMode` always did (log each report; raise at
the step that reads a violation back). ``isolate`` logs the same reports and also maps each violation to
the holders of its slot, through the :class:`~kvcanary.guard.journal.SlotJournal`, over every step from the
one that recorded it to the one that read it back: the requests among them are failed (or, when they
finished in between, reported), the slot's block is quarantined. A request is failed once and reported once;
an id that takes a block again after it finished or was failed is a new request (the journal forgets the
last one's finish and end), failed or reported on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvcanary.consts import FailReason
from kvcanary.guard.codes import FAILURE_CODES, failure_message, get
from kvcanary.guard.decision import FinishedRequest, GuardDecision, RequestFailure
from kvcanary.guard.journal import JournalKind, Owner, OwnerKind, SlotJournal
from kvcanary.guard.violation_policy import ViolationPolicy
from kvcanary.violations import canary_kind

if TYPE_CHECKING:
    from kvcanary.manager.reporter import ViolationEvent

__all__ = ["FAILURE_CODES", "Isolation", "ViolationPolicy", "failure_code", "failure_slug", "is_swa",
           "uncovered_note"]


def failure_slug(event: ViolationEvent) -> str:
    """The :data:`~kvcanary.guard.codes.FAILURE_CODES` key of the check that recorded ``event``."""
    v = event.violation
    if canary_kind(v.kernel_kind).startswith("sweep"):
        return "sweep"
    return "write" if v.is_write_row else "verify"


def failure_code(event: ViolationEvent) -> str:
    """The stable catalog code (``KVC-G001`` ...) of a request failed for ``event``."""
    return FAILURE_CODES[failure_slug(event)]


def is_swa(event: ViolationEvent) -> bool:
    """Whether ``event``'s slot is a sliding-window pool slot (a ``*_SWA`` check)."""
    return event.violation.tag_name.endswith("_SWA")


def uncovered_note(tag: str, slot: int, first_step: int, last_step: int) -> str:
    """What a window the journal no longer covers (``not journal.covers(first_step)``) may miss: a request
    that held ``slot`` and left before the ring's oldest event is neither failed nor reported."""
    return (f"{tag} at slot {slot}: the journal no longer covers steps {first_step}..{last_step} (their oldest "
            "events left its ring): a request that held the slot and left before then is not named")


class Isolation:
    """Builds each step's :class:`GuardDecision` from the violations read back and the journals."""

    def __init__(self, journal: SlotJournal, swa_journal: SlotJournal) -> None:
        self.journal = journal
        self.swa_journal = swa_journal
        self.reported: dict[tuple[str, int], None] = {}
        """(request id, finish step) of the finished requests reported so far (each is reported once), at most
        ``journal.max_finished`` of them (oldest forgotten first): a request's finish step tells it apart from
        another request with its id."""

    def decide(self, events: Sequence[ViolationEvent], step: int) -> GuardDecision:
        """The decision for ``events``, read back at ``step``; records the quarantines in the journals."""
        fail: dict[str, RequestFailure] = {}
        finished: dict[str, FinishedRequest] = {}
        quarantine: dict[int, None] = {}
        quarantine_swa: dict[int, None] = {}
        notes: list[str] = []
        windows: dict[tuple[bool, int, int], list[Owner]] = {}
        """Per (swa, block, first step): the holders over the window to ``step`` (a replay of a busy block's
        events is asked once per decision, however many of its slots were read back)."""
        for e in events:
            v = e.violation
            swa = is_swa(e)
            journal = self.swa_journal if swa else self.journal
            if v.slot_idx <= 0:  # the padding slot (a zero-slot extension row): no block to take out, but the
                # engine journals the rows that read it inside a live range (block 0, for that step)
                notes.append(f"{v.tag_name} at slot {v.slot_idx}: no block to quarantine")
            else:
                block = journal.block_of(v.slot_idx)
                if not journal.quarantined(v.slot_idx):
                    (quarantine_swa if swa else quarantine)[block] = None
                    journal.record(journal.filing_step(step), JournalKind.QUARANTINED, [block])
            owners: list[Owner] = []
            if v.slot_idx >= 0:
                key = (swa, journal.block_of(v.slot_idx), e.step_recorded)
                got = windows.get(key)
                if got is None:
                    got = windows[key] = journal.owners_between(v.slot_idx, e.step_recorded, step)
                    if not journal.covers(e.step_recorded):
                        notes.append(uncovered_note(v.tag_name, v.slot_idx, e.step_recorded, step))
                owners = got
            if not owners:
                notes.append(f"{v.tag_name} at slot {v.slot_idx}: no holder in the journal")
            for o in owners:
                if o.kind is not OwnerKind.REQUEST or o.id in fail or journal.ended(o.id):
                    continue  # a request is failed once (ended: failed, and its id has taken no block since)
                done = journal.finished_step(o.id)
                if done is not None and done <= step:
                    if (o.id, done) not in self.reported and o.id not in finished:
                        finished[o.id] = FinishedRequest(o.id, done)
                    continue
                check = canary_kind(v.kernel_kind)
                reasons = tuple(str(r.name) for r in FailReason if v.fail_reason_bits & int(r))
                fc = get(failure_slug(e))
                msg = failure_message(o.id, fc.slug, check=check, slot=v.slot_idx, position=v.position,
                                      reasons="+".join(v.reason_labels), step=e.step_recorded)
                fail[o.id] = RequestFailure(request_id=o.id, code=fc.code, check=check, slot=v.slot_idx,
                                            position=v.position, fail_reasons=reasons, step=e.step_recorded,
                                            message=msg, alias=fc.alias)
        for rid in fail:
            self.journal.end(rid)
            self.swa_journal.end(rid)
        reported = self.reported
        for f in finished.values():
            if len(reported) >= self.journal.max_finished:
                del reported[next(iter(reported))]
            reported[f.request_id, f.finished_step] = None
        return GuardDecision(step=step, events=tuple(events), fail=tuple(fail.values()), quarantine=tuple(quarantine),
                             finished=tuple(finished.values()), notes=tuple(notes),
                             quarantine_swa=tuple(quarantine_swa))

"""The demo engine's side of the isolate policy: the journal it feeds and the adapter that carries out
the manager's decisions.

Before each forward the guard records, for every request row, the slots that forward reads and writes
(``req_to_token[row, :prefix + extend]``, and through ``full_to_swa_index_mapping`` the sliding window's SWA
slots) as changes of what the request holds; at the end of each step it records what left (finished,
aborted, retracted and failed requests) and the radix tree's additions and evictions. A decision fails
its requests (:meth:`RequestTable.fail`, freeing their own KV) and quarantines its slots (off the free lists,
out of the radix tree with every node below them); any other request whose row names a quarantined slot is
failed too. Quarantined slots come back after ``reinstate_after`` steps (None: never), scrubbed, so the
next owner's write rewrites their KV and records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from time import perf_counter
from typing import TYPE_CHECKING

from kvcanary.demo.engine.requests import ReqState
from kvcanary.guard import GuardDecision, JournalKind, Owner, OwnerKind, RequestFailure, SlotJournal
from kvcanary.guard.followup import quarantined_failure
from kvcanary.guard.history import History, HistoryMap

if TYPE_CHECKING:
    from kvcanary.demo.engine.forward_batch import Forward
    from kvcanary.demo.engine.memory import KvMemory
    from kvcanary.demo.engine.requests import Request, RequestTable
    from kvcanary.manager import CanaryManager

CACHE_OWNER = Owner(OwnerKind.CACHE, "radix")
_RID = attrgetter("rid")


_OWNERS: dict[int, Owner] = {}  # made once per request id (a cache, cleared when it grows large)


def request_owner(rid: int) -> Owner:
    """The journal's name for request ``rid`` (its id as a string)."""
    owner = _OWNERS.get(rid)
    if owner is None:
        if len(_OWNERS) >= 1 << 16:
            _OWNERS.clear()
        owner = _OWNERS[rid] = Owner(OwnerKind.REQUEST, str(rid))
    return owner


@dataclass
class Quarantine:
    """Slots out of service since ``step``."""

    step: int
    slots: set[int] = field(default_factory=set)
    swa_slots: set[int] = field(default_factory=set)


class DemoGuard:
    """Journal feeder and :class:`~kvcanary.guard.EngineAdapter` of one demo engine."""

    def __init__(self, memory: KvMemory, requests: RequestTable, managers: list[CanaryManager], *,
                 window: int, reinstate_after: int | None = None) -> None:
        self.memory = memory
        self.requests = requests
        self.managers = managers
        self.window = window
        self.reinstate_after = reinstate_after
        self._held: dict[int, set[int]] = {}
        self._held_swa: dict[int, set[int]] = {}
        self._seen: dict[int, tuple[int, int, bool]] = {}
        """Per request: the req_to_token row its last forward read, how far, and whether slot 0 was in it."""
        self._rows: dict[int, list[int]] = {}
        """req_to_token's host rows as lists, kept by the table's ``write`` (below): read with no tensor op."""
        self._low: dict[int, int] = {}
        """Per row, the lowest position written since a forward last read it (absent: nothing written)."""
        self.seconds = 0.0
        """Host time spent feeding the journals so far (:meth:`observe`, :meth:`end_of_step` and the copy of
        each req_to_token write)."""
        table = memory.r2t
        orig_write = table.write

        def write(row: int, start: int, slots: list[int]) -> None:
            orig_write(row, start, slots)
            t0 = perf_counter()
            self._wrote(row, start, slots)
            self.seconds += perf_counter() - t0

        table.write = write  # type: ignore[method-assign]
        self._cached: set[int] = set()
        self._tree_version = -1  # the radix tree's version when _cached was taken
        self.quarantines: list[Quarantine] = []
        keep = managers[0].config.guard_history
        self.failed: HistoryMap[int, str] = HistoryMap(keep)
        """Request id -> the error it was failed with, the newest ``config.guard_history`` (None: every one)."""
        self.decisions: History[GuardDecision] = History(keep)
        """The decisions handed to this guard, the newest ``config.guard_history``."""
        for m in managers:
            m.set_adapter(self)

    @property
    def step(self) -> int:
        return self.managers[0].step

    @property
    def quarantined(self) -> set[int]:
        """Full slots out of service now."""
        return {s for q in self.quarantines for s in q.slots}

    def _journals(self, swa: bool) -> list[SlotJournal]:
        return [m.swa_journal if swa else m.journal for m in self.managers]

    def _record(self, kind: JournalKind, slots: list[int], owner: Owner, *, swa: bool = False) -> None:
        if slots:
            for j in self._journals(swa):
                j.record(self.step, kind, slots, owner)

    # -- the journal --------------------------------------------------------------------------------------
    def _wrote(self, row: int, start: int, slots: list[int]) -> None:
        if not slots:
            return
        mirror = self._rows.get(row)
        if mirror is None:
            mirror = self._rows[row] = []
        have = len(mirror)
        if start == have:  # the row grows (a decode row's new slot, a prefill chunk)
            mirror += map(int, slots)
        else:
            end = start + len(slots)
            if have < end:
                mirror.extend([0] * (end - have))
            mirror[start:end] = [int(s) for s in slots]
        low = self._low.get(row)
        if low is None or start < low:
            self._low[row] = start

    def observe(self, fwd: Forward) -> None:
        """Before a forward: what each request row reads and writes. Only the part of a row's live range past
        what the request's last forward read is looked at, when nothing before it was rewritten since (its
        slots are held already): a decode row costs its new slot, never its context, and no tensor op. A row
        whose new part is exactly the slots it writes (a decode row, a prefill chunk) takes the short path:
        its slots not held yet are ALLOCATED (what the general path records for such a row too)."""
        t0 = perf_counter()
        swa = self.memory.swa
        full: list[tuple[JournalKind, int, Owner]] = []  # the forward's events in order, filed in bulk below
        ring: list[tuple[JournalKind, int, Owner]] = []
        allocated = JournalKind.ALLOCATED
        seen_of, low_of, rows, held_of, owners = self._seen, self._low, self._rows, self._held, _OWNERS
        for row in fwd.rows:
            req = row.req
            if req is None:
                continue
            end = row.prefix + row.extend
            r = req.row
            rid = req.rid
            seen = seen_of.get(rid)
            low = low_of.pop(r, None)
            if seen is not None and seen[0] == r and seen[1] <= end and (low is None or low >= seen[1]):
                start, zero = seen[1], seen[2]
            else:
                start, zero = 0, False
            mirror = rows.get(r, [])
            part = mirror[start:end]
            owner = owners.get(rid) or request_owner(rid)
            held = held_of.get(rid)
            if (held is not None and not zero and len(part) == end - start and part == row.locs
                    and 0 not in part):  # the short path: every slot read anew is one this row writes
                seen_of[rid] = (r, end, False)
                if len(part) == 1:  # a decode row (no comprehension: this runs once per row and step)
                    slot = part[0]
                    if slot not in held:
                        held.add(slot)
                        full.append((allocated, slot, owner))
                else:
                    new = sorted(set(part) - held)
                    held.update(new)
                    full += [(allocated, s, owner) for s in new]
            else:
                if len(part) < end - start:
                    part += [0] * (end - start - len(part))
                zero = zero or 0 in part
                seen_of[rid] = (r, end, zero)
                if zero:  # a live range naming the padding slot (a bug): held for this step only
                    full += ((JournalKind.SHARED, 0, owner), (JournalKind.RELEASED, 0, owner))
                self._diff(full, owner, held_of.setdefault(rid, set()), set(part) - {0}, set(row.locs))
            if swa is not None:
                lo = max(0, row.prefix - self.window)
                lut = swa.host_lut
                win = {lut[s] for s in mirror[lo:end]} - {0}
                self._diff(ring, owner, self._held_swa.setdefault(rid, set()), win, set())
        if full:
            self._file(full, swa=False)
        if ring:
            self._file(ring, swa=True)
        self.seconds += perf_counter() - t0

    @staticmethod
    def _diff(out: list[tuple[JournalKind, int, Owner]], owner: Owner, before: set[int], now: set[int],
              own: set[int]) -> None:
        """What ``owner`` newly holds: ALLOCATED where it writes the slot, SHARED where it only reads it."""
        new = now - before
        if new:
            out += [(JournalKind.ALLOCATED, s, owner) for s in sorted(new & own)]
            out += [(JournalKind.SHARED, s, owner) for s in sorted(new - own)]
            before |= new  # a slot read once stays held until the request leaves

    def _file(self, events: list[tuple[JournalKind, int, Owner]], *, swa: bool) -> None:
        """Record ``events`` in their order: one journal call per run of the same kind (a decode forward's
        new slots are one run of ALLOCATED events)."""
        at = 0
        while at < len(events):
            kind = events[at][0]
            stop = at + 1
            while stop < len(events) and events[stop][0] is kind:
                stop += 1
            run = events[at:stop]
            blocks = [e[1] for e in run]
            owners: list[Owner | None] = [e[2] for e in run]
            for j in self._journals(swa):
                j.record_each(self.step, kind, blocks, owners)
            at = stop

    def end_of_step(self) -> None:
        """After the step's forwards, before the canary's end_step: who left, what the tree keeps now."""
        t0 = perf_counter()
        if self._held:  # who left: the held requests no longer running (a done request is never running)
            live = set(map(_RID, self.requests.running))
            if self._held.keys() - live:
                for rid in [r for r in self._held if r not in live]:
                    self._leave(rid)
        tree = self.memory.tree
        if tree is not None and tree.version != self._tree_version:  # (else the tree holds the same slots)
            now = {s for n, _ in tree.nodes() for s in n.value}
            self._record(JournalKind.CACHED, sorted(now - self._cached), CACHE_OWNER)
            self._record(JournalKind.RELEASED, sorted(self._cached - now), CACHE_OWNER)
            self._cached = now
            self._tree_version = tree.version
        self.seconds += perf_counter() - t0
        self._reinstate_due()

    def _leave(self, rid: int) -> None:
        owner = request_owner(rid)
        self._seen.pop(rid, None)
        self._record(JournalKind.RELEASED, sorted(self._held.pop(rid, set())), owner)
        self._record(JournalKind.RELEASED, sorted(self._held_swa.pop(rid, set())), owner, swa=True)
        req = self.requests.get(rid)
        if req is not None and req.state is ReqState.FINISHED:
            for m in self.managers:
                m.journal.finish(str(rid), req.finish_step if req.finish_step >= 0 else self.step)

    def _reinstate_due(self) -> None:
        if self.reinstate_after is None:
            return
        due = [q for q in self.quarantines if self.step - q.step >= self.reinstate_after]
        for q in due:
            self.quarantines.remove(q)
            self.memory.reinstate(q.slots, q.swa_slots)
            self._record(JournalKind.REINSTATED, sorted(q.slots), CACHE_OWNER)
            self._record(JournalKind.REINSTATED, sorted(q.swa_slots), CACHE_OWNER, swa=True)
            self._cached -= q.slots

    # -- the adapter ----------------------------------------------------------------------------------------
    def apply(self, decision: GuardDecision) -> None:
        """Fail the decision's requests, quarantine its slots, fail whoever else holds a quarantined slot
        (``KVC-G004``: no decision names them, so they are reported to the deciding manager's sinks)."""
        self.decisions.append(decision)
        for f in decision.fail:
            req = self.requests.get(int(f.request_id))
            if req is not None and not req.done:
                self._fail(req, f.message)
        slots, swa = set(decision.quarantine), set(decision.quarantine_swa)
        if not (slots or swa):
            return
        bad = slots | self.memory.mapped_to(swa)
        held_failed: list[RequestFailure] = []
        for req in list(self.requests.running):
            held = sorted(set(self.memory.r2t.read(req.row, 0, req.alloc_len)) & bad)
            if held and not req.done:
                f = quarantined_failure(str(req.rid), "slot(s)", held, slot=held[0], step=decision.step)
                self._fail(req, f.message)
                held_failed.append(f)
        self.memory.quarantine(slots, swa)
        self.quarantines.append(Quarantine(self.step, slots, swa))
        if held_failed:
            self._decider(decision).report_failures(held_failed, step=decision.step)

    def _decider(self, decision: GuardDecision) -> CanaryManager:
        """The manager whose newest decision ``decision`` is (the one applying it now), else the first: whose
        sinks hear the requests failed with it."""
        for m in self.managers:
            if len(m.decisions) and m.decisions[-1] is decision:
                return m
        return self.managers[0]

    def _fail(self, req: Request, message: str) -> None:
        self.requests.fail(req, message, self.step)
        self.failed[req.rid] = message
        self._leave(req.rid)

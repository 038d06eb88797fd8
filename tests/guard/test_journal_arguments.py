"""What an adapter hands the journal by hand: an ``Owner``'s kind and id, and a request's finish step. A value of the
wrong kind is refused where it is given, naming it, and nothing is kept (it broke the isolate policy later: rD). A kind
given as its value (``"request"``) is kept as its ``OwnerKind``."""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest

from kvcanary.guard import GuardDecision, JournalKind, Owner, OwnerKind, SlotJournal
from tests.manager.test_guard import b_reads_corrupt_slot_1, isolate_world, req
from tests.manager.world import Req


def _isolated() -> list[GuardDecision]:
    """A's slots recorded with ``Owner("request", "a")`` (the kind as its plain string), a flip under them, one
    read-back: the decisions the adapter got."""
    w, rec = isolate_world()
    m = w.manager
    a = Req(1, [5, 6, 7, 8, 9], [1, 2, 3])
    for s in a.slots:
        m.journal.record(m.step, JournalKind.ALLOCATED, [s], Owner("request", "a"))  # type: ignore[arg-type]
    w.forward([(a, 0, 3)])
    w.step()
    w.k[1, 1, 1] -= 2.0
    a.slots.append(4)
    m.journal.record(m.step, JournalKind.ALLOCATED, [4], Owner("request", "a"))  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(logging.getLogger("kvcanary.manager"), "disabled", True)
        w.forward([(a, 3, 1)])
        w.step()
        w.step()
    return rec.applied


def test_an_owner_built_from_the_kinds_string_is_failed_like_one_built_from_the_enum() -> None:
    owner = Owner("request", "a")  # type: ignore[arg-type]
    assert owner.kind is OwnerKind.REQUEST and owner == Owner(OwnerKind.REQUEST, "a")
    assert Owner("cache", "c").kind is OwnerKind.CACHE  # type: ignore[arg-type]
    applied = _isolated()
    assert [d.failed_ids for d in applied] == [("a",)]  # before the fix: [()], the block quarantined, nobody failed


@pytest.mark.parametrize(("kind", "rid", "field", "error"), [
    ("requst", "a", "kind", ValueError), ("REQUEST", "a", "kind", ValueError), (None, "a", "kind", TypeError),
    (1, "a", "kind", TypeError), (OwnerKind.REQUEST, 5, "id", TypeError), (OwnerKind.REQUEST, None, "id", TypeError),
    (OwnerKind.CACHE, b"a", "id", TypeError)])
def test_an_owner_of_no_known_kind_or_no_string_id_is_refused(kind: object, rid: object, field: str,
                                                              error: type[Exception]) -> None:
    with pytest.raises(error, match=rf"\bOwner\.{field} must be ") as info:
        Owner(kind, rid)  # type: ignore[arg-type]
    assert type(info.value) is error


@pytest.mark.parametrize("step", ["3", None, 2.5])
def test_finish_refuses_a_step_that_is_no_int_and_keeps_nothing(step: object) -> None:
    j = SlotJournal(block_size=1)
    with pytest.raises(TypeError, match=r"^kv-canary: SlotJournal\.finish: step must be an int \(the step the request "
                                        r"finished at\), got "):
        j.finish("a", step)  # type: ignore[arg-type]
    assert j.finished_step("a") is None


def test_finish_keeps_an_integer_step_as_an_int() -> None:
    j = SlotJournal(block_size=1)
    j.finish("a", np.int64(3))
    assert type(j.finished_step("a")) is int and j.finished_step("a") == 3


@pytest.mark.parametrize("call", ["finish", "end"])
def test_finish_and_end_refuse_a_request_id_that_is_no_string(call: str) -> None:
    j = SlotJournal(block_size=1)
    with pytest.raises(TypeError, match=rf"^kv-canary: SlotJournal\.{call}: request_id must be a str \(the id its Owner "
                                        r"carries\), got int 7$"):
        if call == "finish":
            j.finish(7, 3)  # type: ignore[arg-type]
        else:
            j.end(7)  # type: ignore[arg-type]
    assert j.finished_step(7) is None and not j.ended(7)  # type: ignore[arg-type]


def test_a_finish_step_of_the_wrong_type_never_reaches_the_read_back() -> None:
    w, rec = isolate_world()
    m = w.manager
    b_reads_corrupt_slot_1(w)
    with pytest.raises(TypeError, match=r"\bstep\b"):  # refused here, at the adapter's call...
        m.journal.finish("b", str(m.step))  # type: ignore[arg-type]
    w.step()
    w.step()  # ...so the read-back goes on (b, whose finish was refused, counts as running)
    assert [set(d.failed_ids) for d in rec.applied] == [{"a", "b"}]
    assert req("b") in m.journal.owners_at(1, 1)


_REFUSED: list[tuple[str, Callable[[SlotJournal], object]]] = [
    ("record", lambda j: j.record(1, JournalKind.ALLOCATED, [-1])),
    ("record", lambda j: j.record(1, "allocated", [1])),  # type: ignore[arg-type]
    ("record", lambda j: j.record(1, JournalKind.ALLOCATED, [1], "a")),  # type: ignore[arg-type]
    ("record", lambda j: j.record(0, JournalKind.ALLOCATED, [1])),  # below the latest recorded step, 1
    ("record_each", lambda j: j.record_each(1, JournalKind.ALLOCATED, [1, 2], [None])),
    ("record_each", lambda j: j.record_each(1, JournalKind.ALLOCATED, [1], [None], ["x"], [1])),  # type: ignore[list-item]
    ("finish", lambda j: j.finish("a", 1.0)),  # type: ignore[arg-type]
    ("end", lambda j: j.end(None)),  # type: ignore[arg-type]
    ("add_observer", lambda j: j.add_observer(lambda *a: None, JournalKind.FREED)),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("method", "call"), _REFUSED, ids=[f"{m}-{i}" for i, (m, _) in enumerate(_REFUSED)])
def test_every_refusal_names_the_journal_and_the_method(method: str, call: Callable[[SlotJournal], object]) -> None:
    """As every kv-canary error: ``kv-canary: SlotJournal.<method>: ...``, the call refused (rE noted a)."""
    j = SlotJournal(block_size=1)
    j.record(1, JournalKind.ALLOCATED, [3])
    with pytest.raises((TypeError, ValueError), match=rf"^kv-canary: SlotJournal\.{method}: [\w, ]+ must "):
        call(j)
    assert j.recorded == 1

"""The one outcome type and printer of the isolate demos: the promise each run keeps, and what it prints for
an engine that quarantines slots (kvcanary's demo engine) and one that quarantines blocks (transformers)."""

from __future__ import annotations

import dataclasses
import io

from kvcanary.guard.codes import quarantined_message
from kvcanary.guard.outcome import BLOCKS, SLOTS, IsolationOutcome, describe, sorted_ids, summary


def outcome(**kw: object) -> IsolationOutcome:
    base = IsolationOutcome(label="kv_flip_used", injected=True, fired_step=7, violations=3,
                            failed={"10": "kv-canary: request 10 failed: x", "2": "kv-canary: request 2 failed: y"},
                            served_equal=("1", "3"), served_changed=(), affected=frozenset({"2", "10"}),
                            quarantined=(33,), quarantined_swa=(), finished_reported=(), repeated=0, seconds=1.25)
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def printed(o: IsolationOutcome) -> str:
    out = io.StringIO()
    describe(o, out)
    return out.getvalue()


def test_request_ids_sort_by_number_then_as_text() -> None:
    assert sorted_ids(["10", "2", "req_b", "req_a", "1"]) == ("1", "2", "10", "req_a", "req_b")


def test_the_promise() -> None:
    assert outcome().ok
    assert not outcome(served_changed=("3",)).ok  # a served request's tokens changed
    assert not outcome(affected=frozenset({"2"})).ok  # request 10 failed without holding a reported slot
    assert outcome(affected=frozenset({"2"})).healthy_failed == ("10",)
    assert not outcome(repeated=1).ok and not outcome(unfinished=("4",)).ok and not outcome(error="boom").ok
    clean = outcome(injected=False, fired_step=None, failed={}, violations=0, quarantined=(), affected=frozenset())
    assert clean.ok and not dataclasses.replace(clean, violations=1).ok
    # a fault that did not fire keeps the promise unless the run must fire (transformers' runs)
    quiet = outcome(fired_step=None, violations=0, failed={}, affected=frozenset())
    assert quiet.ok and not dataclasses.replace(quiet, must_fire=True).ok
    assert outcome(must_fire=True).ok


def test_the_demo_engine_prints_slots() -> None:
    text = printed(outcome(quarantined_swa=tuple(range(40, 60))))
    assert text.startswith("\n=== kv_flip_used [isolate: OK] (1.2s)\n")
    assert "  fault fired in step 7; 3 violation row(s)\n" in text
    assert "  failed:      2, 10\n    kv-canary: request 2 failed: y\n    kv-canary: request 10 failed: x\n" in text
    assert "  served:      2 request(s), 2 identical to the clean run\n" in text
    assert "  quarantined: 33; SWA slots 20 slots (40, 41, 42, 43, 44, 45, ...)\n" in text
    assert "HEALTHY" not in text


def test_transformers_prints_blocks_and_what_went_wrong() -> None:
    msg = quarantined_message("req_3", "block(s)", [12])
    o = outcome(label="stale_swa_block (swa)", units=BLOCKS, reference="the run without canaries",
                failed={"req_3": msg}, affected=frozenset(), served_changed=("req_1",), quarantined=(4, 12),
                quarantined_swa=(2,), finished_reported=(("req_0", 5),), repeated=2, must_fire=True)
    text = printed(o)
    assert text.startswith("\n=== stale_swa_block (swa) [isolate: FAILED]")
    assert f"  failed:      req_3\n    {msg}\n" in text and msg.endswith("`kvcanary explain KVC-G004`]")
    assert "identical to the run without canaries, CHANGED: req_1\n" in text
    assert "  finished before the read-back (reported): req_0 (step 5)\n" in text
    assert "  quarantined: blocks 4, 12; ring blocks 2\n" in text
    assert "  HEALTHY REQUESTS FAILED: req_3\n" in text
    assert "  2 violation(s) on quarantined blocks after their quarantine\n" in text
    assert SLOTS.noun == "slot" and BLOCKS.noun == "block"


def test_summary_names_the_runs_that_broke_the_promise() -> None:
    good, bad = outcome(), outcome(label="radix_uaf", repeated=1)
    assert summary([good], 2.0, "all good") == "1 run(s) under the isolate policy in 2.0s: all good"
    assert summary([good, bad], 2.0, "all good").endswith("1 run(s) FAILED: radix_uaf")


def test_a_window_the_journal_no_longer_covers_is_printed_and_the_promise_stands() -> None:
    from kvcanary.guard.policy import uncovered_note

    note = uncovered_note("KV_VERIFY", 33, 4, 90)
    o = outcome(uncovered=(note,))
    assert o.ok  # what it may miss is said, not a broken promise
    assert f"  {note}\n" in printed(o) and note not in printed(outcome())
    assert "slot 33" in note and "steps 4..90" in note

"""The isolate policy in transformers' continuous batching, for every fault class and a corruption of a block
only the prefix cache holds: affected requests end FAILED with kvcanary's error, the run goes on, every
served request equals a run without canaries, quarantined blocks leave the cache and are not reported again."""

from __future__ import annotations

from typing import Any

import pytest

from kvcanary.integrations.transformers import attach_canaries
from kvcanary.integrations.transformers.fault_kinds import NEEDS_SLIDING_WINDOW, TfFault
from kvcanary.integrations.transformers.isolate import CACHED_FLIP, Outputs, generate_status, run_isolated
from tests.integrations.transformers.harness import SEED, SLIDING, prompts

NEW = 12
_refs: dict[int, Outputs] = {}


def reference(model: Any) -> Outputs:
    if id(model) not in _refs:
        _refs[id(model)] = generate_status(model, prompts(), max_new_tokens=NEW)[0]
    return _refs[id(model)]


def check(model: Any, scenario: TfFault | str | None) -> None:
    o = run_isolated(model, prompts(), scenario, reference=reference(model), backend=None, max_new_tokens=NEW)
    where = f"seed {SEED}, {o.label}"
    assert not o.served_changed, f"{where}: served requests changed: {o.served_changed}"
    assert not o.healthy_failed, f"{where}: requests failed without holding a reported block: {o.healthy_failed}"
    assert o.repeated == 0, f"{where}: a quarantined block was reported again"
    if scenario is None:
        assert not o.failed and o.violations == 0 and len(o.served_equal) == len(prompts())
        return
    assert o.fired_step is not None and o.violations > 0, f"{where}: nothing fired or nothing was found"
    assert o.quarantined or o.quarantined_swa, where
    for rid, err in o.failed.items():
        assert err.startswith(f"kv-canary: request {rid} failed:"), f"{where}: {err!r}"
    assert len(o.failed) + len(o.served_equal) == len(prompts()), f"{where}: the run did not go on"
    assert o.ok


def test_clean_run_under_isolate_is_silent_and_identical(model: Any) -> None:
    check(model, None)


@pytest.mark.parametrize("fault", [f for f in TfFault if f not in NEEDS_SLIDING_WINDOW], ids=lambda f: f.value)
def test_isolation_promise(model: Any, fault: TfFault) -> None:
    check(model, fault)


def test_one_corruption_touches_every_request_holding_the_block(model: Any) -> None:
    o = run_isolated(model, prompts(), TfFault.BLOCK_TABLE_REDIRECT, reference=reference(model), backend=None,
                     max_new_tokens=NEW)
    # the redirected request and the block's owner both hold it: both fail (or are reported, if already done)
    assert len(o.failed) + len(o.finished_reported) >= 2, f"seed {SEED}: {o.failed} {o.finished_reported}"
    assert o.ok


@SLIDING
def test_isolation_promise_sliding_window(hybrid: Any) -> None:
    check(hybrid, TfFault.STALE_SWA_BLOCK)


def test_a_block_only_the_cache_holds_is_caught_by_the_sweep(model: Any) -> None:
    o = run_isolated(model, prompts(), CACHED_FLIP, reference=reference(model), backend=None, max_new_tokens=NEW)
    assert o.fired_step is not None and o.violations > 0, f"seed {SEED}: the flipped cached block went unnoticed"
    assert o.quarantined and not o.served_changed and not o.healthy_failed and o.ok
    # whoever had read it and finished before the read-back is reported with its finish step, not failed
    assert all(step < o.fired_step + 3 for _, step in o.finished_reported)


def test_on_violation_is_checked(model: Any) -> None:
    with pytest.raises(ValueError, match="on_violation must be one of log/raise/isolate, got 'drop'"):
        attach_canaries(model, on_violation="drop")
    with pytest.raises(ValueError, match="on_violation='isolate' conflicts with mode='raise'"):
        attach_canaries(model, mode="raise", on_violation="isolate")


def test_demo_command_under_isolate(capsys: pytest.CaptureFixture[str]) -> None:
    from kvcanary.cli import main

    rc = main(["demo", "--engine", "transformers", "--fault", "kv_flip_used", "--on-violation", "isolate",
               "--seed", str(SEED)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "=== kv_flip_used [isolate: OK]" in out and "=== kv_flip_cached_block [isolate: OK]" in out
    assert "kv-canary: request req_" in out and "quarantined: blocks" in out


def test_two_violations_of_one_block_in_an_uncovered_window_give_one_note(model: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Two violations of one slot, same check and step, in a window the journal no longer covers: the outcome
    carries one note for them, not one per violation (``run_isolated`` de-duplicates the notes)."""
    from kvcanary.guard import SlotJournal
    from kvcanary.guard.policy import uncovered_note
    from kvcanary.integrations.transformers import isolate, session
    from kvcanary.manager import ViolationEvent
    from kvcanary.violations import Violation

    slot, step = 5, 3
    twins = [ViolationEvent(Violation.from_row((0, slot, position, 1, 2, 3, 4, 1)), "", position, step, step + 1)
             for position in (0, 1)]
    attach, generate = session.attach_canaries, isolate.generate_status
    canaries: list[Any] = []
    last: list[int] = []

    def attach_kept(*args: Any, **kwargs: Any) -> Any:
        canaries.append(attach(*args, **kwargs))
        return canaries[-1]

    def generate_then_report_twins(*args: Any, **kwargs: Any) -> Any:
        got = generate(*args, **kwargs)
        m = canaries[-1].guards[0].manager
        m.events.extend(twins)  # after the run: the guard never decides on them
        last.append(m.step)
        return got

    monkeypatch.setattr(session, "attach_canaries", attach_kept)
    monkeypatch.setattr(isolate, "generate_status", generate_then_report_twins)
    monkeypatch.setattr(SlotJournal, "covers", lambda self, first_step: False)
    o = run_isolated(model, prompts(), None, reference=reference(model), backend=None, max_new_tokens=NEW)
    assert canaries and o.violations == 0  # canary.reports: a clean run reports nothing
    assert o.uncovered == (uncovered_note(twins[0].violation.tag_name, slot, step, last[0]),)

"""The guard in the manager: the journal, the on_violation setting, and the isolate policy's decisions."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from kvcanary.consts import CanaryMode, RealKvHashMode
from kvcanary.guard import (
    FAILURE_CODES,
    EngineAdapter,
    GuardDecision,
    JournalKind,
    Owner,
    OwnerKind,
    SlotJournal,
    ViolationPolicy,
)
from kvcanary.manager import CanaryConfig, StepStats, ViolationEvent
from kvcanary.monitor.events import decision_event
from tests.manager.world import Req, World, chain_entries, make_world


def req(rid: str) -> Owner:
    return Owner(OwnerKind.REQUEST, rid)


class Recorder:
    """An adapter and a sink at once: keeps what it is told."""

    def __init__(self) -> None:
        self.applied: list[GuardDecision] = []
        self.decisions: list[GuardDecision] = []
        self.violations: list[ViolationEvent] = []
        self.steps: list[int] = []

    def apply(self, decision: GuardDecision) -> None:
        self.applied.append(decision)

    def on_violations(self, events: Sequence[ViolationEvent]) -> None:
        self.violations += events

    def on_decision(self, decision: GuardDecision) -> None:
        self.decisions.append(decision)

    def on_step(self, stats: StepStats) -> None:
        self.steps.append(stats.step)


# -- the journal ----------------------------------------------------------------------------------------
def test_owners_between_covers_every_holder_of_the_window() -> None:
    j = SlotJournal(block_size=4)
    j.record(0, JournalKind.ALLOCATED, [1], req("a"))
    j.record(2, JournalKind.SHARED, [1], req("b"))
    j.record(3, JournalKind.RELEASED, [1], req("a"))
    j.record(5, JournalKind.FREED, [1])
    j.record(6, JournalKind.ALLOCATED, [1], req("c"))
    assert j.owners_at(5, 1) == [req("a")]  # slot 5 is in block 1
    assert j.owners_at(5, 3) == [req("a"), req("b")]  # released during step 3: still held in it
    assert j.owners_at(5, 4) == [req("b")]
    assert j.owners_between(5, 1, 2) == [req("a"), req("b")]
    assert j.owners_between(5, 4, 6) == [req("b"), req("c")]  # b until the free, c after it
    assert j.owners_between(5, 7, 9) == [req("c")]
    assert j.owners_at(3, 1) == []  # block 0: never recorded


def test_journal_keeps_finish_steps_bounded() -> None:
    j = SlotJournal(block_size=1, max_finished=2)
    for i, rid in enumerate("abc"):
        j.finish(rid, i)
    assert j.finished_step("a") is None and j.finished_step("c") == 2


def test_quarantine_until_reinstated() -> None:
    j = SlotJournal(block_size=2)
    j.record(1, JournalKind.QUARANTINED, [3])
    assert j.quarantined(6) and j.quarantined(7) and not j.quarantined(5)
    j.record(4, JournalKind.REINSTATED, [3])
    assert not j.quarantined(6)



def test_record_each_files_a_steps_events_in_one_call() -> None:
    j = SlotJournal(block_size=1)
    seen: list[tuple[int, JournalKind, list[int], Owner | None]] = []
    j.add_observer(lambda step, kind, blocks, owner: seen.append((step, kind, blocks, owner)))
    j.record_each(7, JournalKind.WRITTEN, [4, 5, 9], [req("a"), req("a"), req("b")], [10, 11, 3], [10, 11, 5])
    assert j.recorded == 3
    (e,) = j.history(9)
    assert (e.step, e.kind, e.block, e.owner, e.first_position, e.last_position) == (7, JournalKind.WRITTEN, 9,
                                                                                     req("b"), 3, 5)
    assert j.history(4)[0].first_position == 10 and j.owners_at(5, 7) == [req("a")]
    # the observers hear one call per run of the same owner
    assert seen == [(7, JournalKind.WRITTEN, [4, 5], req("a")), (7, JournalKind.WRITTEN, [9], req("b"))]
    j.record_each(8, JournalKind.ALLOCATED, [2], [req("c")])  # no positions: None
    assert j.history(2)[0].first_position is None and j.history(2)[0].last_position is None
    with pytest.raises(ValueError, match="as long as each other"):
        j.record_each(9, JournalKind.WRITTEN, [1, 2], [req("a")])
    with pytest.raises(ValueError, match="as long as each other"):
        j.record_each(9, JournalKind.WRITTEN, [1], [req("a")], [1, 2], [1])


def test_journal_history_keeps_the_newest_per_block_and_block_ids_are_bounded() -> None:
    j = SlotJournal(block_size=1, max_blocks=8, per_block=2)
    for b in range(8):
        j.record(b, JournalKind.ALLOCATED, [b], req(str(b)))
    with pytest.raises(ValueError, match=r"blocks must be block ids in \[0, max_blocks=8\), got 8"):
        j.record(10, JournalKind.ALLOCATED, [8], req("8"))
    with pytest.raises(ValueError, match=r"record_each: blocks must be block ids in \[0, max_blocks=8\), got -1"):
        j.record_each(10, JournalKind.ALLOCATED, [1, -1], [req("8"), req("8")])
    assert j.recorded == 8 and j.holders(1) == [req("1")]  # nothing of a refused call was recorded
    for s in range(11, 14):
        j.record(s, JournalKind.WRITTEN, [0], req("0"))
    assert [(e.step, e.carried) for e in j.history(0)] == [(0, True), (12, False), (13, False)]  # per_block: the
    assert j.history(0)[0].owner == req("0")  # newest two, led by who held the block before them (carried)
    assert j.holders(0) == [req("0")] and j.owners_at(0, 0) == [req("0")]  # from every event, not the two

# -- the setting -----------------------------------------------------------------------------------------
def test_on_violation_follows_mode_by_default() -> None:
    assert CanaryConfig().policy is ViolationPolicy.LOG
    assert CanaryConfig(mode=CanaryMode.RAISE).policy is ViolationPolicy.RAISE
    cfg = CanaryConfig(on_violation=ViolationPolicy.ISOLATE)
    assert cfg.policy is ViolationPolicy.ISOLATE and cfg.report_mode is CanaryMode.LOG
    assert CanaryConfig(on_violation=ViolationPolicy.RAISE).report_mode is CanaryMode.RAISE


def test_on_violation_is_checked() -> None:
    with pytest.raises(TypeError, match="on_violation must be a ViolationPolicy"):
        CanaryConfig(on_violation="isolate")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_violation=isolate conflicts with mode=RAISE"):
        CanaryConfig(mode=CanaryMode.RAISE, on_violation=ViolationPolicy.ISOLATE)
    assert ViolationPolicy.parse(" Isolate ") is ViolationPolicy.ISOLATE
    with pytest.raises(ValueError, match="on_violation must be one of log/raise/isolate, got 'drop'"):
        ViolationPolicy.parse("drop")


def test_adapter_must_implement_the_protocol() -> None:
    w = make_world()
    with pytest.raises(TypeError, match="adapter must implement EngineAdapter"):
        w.manager.set_adapter(object())  # type: ignore[arg-type]
    assert isinstance(Recorder(), EngineAdapter)


# -- the isolate policy ----------------------------------------------------------------------------------
def isolate_world(**kw: object) -> tuple[World, Recorder]:
    cfg = CanaryConfig(real_kv_mode=RealKvHashMode.ALL, enable_v=True, enable_verify_token=True,
                       health_warmup_steps=3, health_every=1, on_violation=ViolationPolicy.ISOLATE,
                       **kw)  # type: ignore[arg-type]
    w = make_world(config=cfg)
    rec = Recorder()
    w.manager.set_adapter(rec)
    w.manager.add_sink(rec)
    return w, rec


def own(w: World, step: int, rid: str, slots: list[int], kind: JournalKind = JournalKind.ALLOCATED) -> None:
    for s in slots:
        w.manager.journal.record(step, kind, [s], req(rid))


def flip_under_a(w: World) -> Req:
    """Request ``a`` prefilled over slots 1-3, slot 1's K bytes then flipped, and a decode step of ``a`` onto slot
    4: the next end_step (or flush) reads the flip back as ``a``'s. Returns ``a``."""
    m = w.manager
    a = Req(1, [5, 6, 7, 8, 9], [1, 2, 3])
    own(w, m.step, "a", a.slots)
    w.forward([(a, 0, 3)])
    w.step()
    w.k[1, 1, 1] -= 2.0
    a.slots.append(4)
    own(w, m.step, "a", [4])
    w.forward([(a, 3, 1)])
    w.step()
    return a


def b_reads_corrupt_slot_1(w: World) -> None:
    """Request ``a`` prefilled over slots 1-3; ``b`` shares them and owns slot 4; slot 1's K bytes flipped, then
    ``b``'s decode forward reads it (the step not ended: the caller may finish ``b`` in it)."""
    m = w.manager
    a = Req(1, [5, 6, 7, 8, 9], [1, 2, 3])
    b = Req(2, [5, 6, 7, 30, 31], [1, 2, 3, 4])
    own(w, m.step, "a", a.slots)
    w.forward([(a, 0, 3)])
    w.step()
    own(w, m.step, "b", [1, 2, 3], JournalKind.SHARED)
    own(w, m.step, "b", [4])
    w.k[1, 1, 1] -= 2.0
    w.forward([(b, 3, 1)])


def corrupt_a_cached_block(w: World) -> None:
    """Request ``a`` prefilled over slots 1-3 and finished, its slots kept by the prefix cache alone, the sweep
    looking at them every step; then slot 3's K bytes flipped: every later sweep reads it back corrupt (the
    world needs ``sweep_interval=1``)."""
    m = w.manager
    a = Req(1, [5, 6, 7, 8], [1, 2, 3])
    own(w, m.step, "a", a.slots)
    w.forward([(a, 0, 3)])
    w.step()
    for s in a.slots:  # a finished: the prefix cache keeps its slots
        m.journal.record(m.step, JournalKind.RELEASED, [s], req("a"))
        m.journal.record(m.step, JournalKind.CACHED, [s], Owner(OwnerKind.CACHE, "radix"))
    m.journal.finish("a", m.step)
    m.set_sweep_source(lambda: chain_entries([a]))
    w.step()
    w.k[3, 0, 0] += 1.0


def test_isolate_fails_every_reader_of_the_slot_and_quarantines_it(caplog: pytest.LogCaptureFixture) -> None:
    w, rec = isolate_world()
    m = w.manager
    a = Req(1, [5, 6, 7, 8, 9, 10], [1, 2, 3, 4])
    b = Req(2, [5, 6, 11, 12, 13], [1, 2, 5, 6])  # shares a's first two slots
    c = Req(3, [20, 21, 22, 23, 24], [8, 9, 10])
    own(w, m.step, "a", a.slots)
    own(w, m.step, "c", c.slots)
    w.forward([(a, 0, 4), (c, 0, 3)])
    w.step()
    own(w, m.step, "b", [1, 2], JournalKind.SHARED)
    own(w, m.step, "b", [5, 6])
    w.forward([(b, 2, 2)])
    w.step()
    corrupt_step = m.step
    w.k[2, 0, 0] += 1.0  # the bytes under a record change: every holder read bad KV
    a.slots.append(7)
    own(w, m.step, "a", [7])
    with caplog.at_level(logging.WARNING, "kvcanary.manager"):
        w.forward([(a, 4, 1)])
        w.step()
        assert not rec.applied  # read back one step later
        c.slots.append(11)
        own(w, m.step, "c", [11])
        w.forward([(c, 3, 1)])
        w.step()
    assert "kv_canary violation:" in caplog.text  # the isolate policy logs the same reports
    assert len(rec.applied) == 1
    d = rec.applied[0]
    assert d is rec.decisions[0] and d is m.decisions[0]
    assert d.step == corrupt_step + 1 and d.events and all(e.step_recorded == corrupt_step for e in d.events)
    assert set(d.failed_ids) == {"a", "b"}  # c never held slot 2
    assert d.quarantine == (2,)
    f = d.fail[0]
    assert f.code == FAILURE_CODES["verify"] and f.check.startswith("per_forward_") and f.slot == 2
    assert f.fail_reasons == ("VERIFY_REAL_KV_HASH_MISMATCH",) and f.step == corrupt_step
    assert f.request_id in f.message and "slot 2" in f.message
    # the catalog code, its alias, and the command that explains it: in the text, the JSON event, the metrics
    assert f.code == "KVC-G001" and f.alias == "KVCANARY-CORRUPT-READ"
    assert f.message.endswith(" [KVC-G001 KVCANARY-CORRUPT-READ; run `kvcanary explain KVC-G001`]")
    assert decision_event(d)["failed"][0]["code"] == "KVC-G001"
    assert m.journal.quarantined(2) and not m.journal.quarantined(1)
    assert rec.violations == list(d.events)
    assert rec.steps == list(range(m.step))


def test_isolate_reports_a_reader_that_finished_before_the_read_back() -> None:
    w, rec = isolate_world()
    m = w.manager
    b_reads_corrupt_slot_1(w)  # and finishes in this step
    m.journal.finish("b", m.step)
    finished_at = m.step
    w.step()
    w.step()
    d = rec.applied[0]
    assert d.failed_ids == ("a",)
    assert [(x.request_id, x.finished_step) for x in d.finished] == [("b", finished_at)]
    assert d.quarantine == (1,)


def test_isolate_quarantines_a_block_only_the_cache_holds() -> None:
    w, rec = isolate_world(sweep_interval=1)
    m = w.manager
    corrupt_a_cached_block(w)
    for _ in range(3):
        w.step()
    d = rec.applied[0]
    assert not d.fail and not d.finished and d.quarantine == (3,)
    assert d.events[0].violation.tag_name.startswith("SWEEP")
    assert all(x.code == FAILURE_CODES["sweep"] for x in d.fail)
    assert len(m.decisions) == len(rec.decisions)
    assert all(not later.quarantine for later in m.decisions[1:])  # quarantined once


def test_a_long_isolate_run_keeps_only_the_newest_guard_history_decisions() -> None:
    """A cached block read back corrupt by every sweep: one decision a step for 300 steps. The manager keeps
    the newest ``guard_history`` of them (the sink hears every one); ``total`` and ``dropped`` count the rest."""
    w, rec = isolate_world(sweep_interval=1, guard_history=16)
    m = w.manager
    corrupt_a_cached_block(w)
    logging.getLogger("kvcanary.manager").disabled = True  # 300 reports
    try:
        for _ in range(300):
            w.step()
    finally:
        logging.getLogger("kvcanary.manager").disabled = False
    assert len(rec.decisions) >= 299, "the scenario makes a decision every step"
    assert len(m.decisions) == 16 and m.decisions.limit == 16
    assert m.decisions.total == len(rec.decisions) and m.decisions.dropped == len(rec.decisions) - 16
    assert all(kept is heard for kept, heard in zip(m.decisions, rec.decisions[-16:], strict=True))
    assert m.decisions[-1] is rec.decisions[-1] and m.decisions[-1].step == m.step - 1
    assert rec.decisions[0].quarantine == (3,) and rec.decisions[0] not in m.decisions  # the first is let go


def test_log_and_raise_policies_make_no_decision() -> None:
    for mode in (CanaryMode.LOG, CanaryMode.RAISE):
        w = make_world(config=CanaryConfig(mode=mode, real_kv_mode=RealKvHashMode.ALL, enable_verify_token=True))
        rec = Recorder()
        w.manager.set_adapter(rec)
        w.manager.add_sink(rec)
        a = Req(1, [5, 6, 7, 8], [1, 2, 3])
        own(w, 0, "a", a.slots)
        w.forward([(a, 0, 2)])
        w.step()
        w.k[1, 0, 0] += 1.0
        w.forward([(a, 2, 1)])
        w.step()
        if mode is CanaryMode.RAISE:
            with pytest.raises(RuntimeError, match="kv_canary violation"):
                w.step()
        else:
            w.step()
        assert rec.violations and not rec.applied and not rec.decisions and not w.manager.decisions


# -- the policies page's adapter example ------------------------------------------------------------------
def test_policies_page_adapter_example_runs() -> None:
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "policies.md"
    blocks = re.findall(r"^```python[^\n]*\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    ns: dict[str, object] = {"__name__": "docs_policies"}
    exec(compile("\n".join(blocks), str(page), "exec"), ns)
    config = ns["config"]
    assert isinstance(config, CanaryConfig) and config.policy is ViolationPolicy.ISOLATE

    class Engine:
        page_size = 1

        def __init__(self) -> None:
            self.failed: dict[str, str] = {}
            self.quarantined: list[int] = []

        def fail_request(self, rid: str, error: str) -> None:
            self.failed[rid] = error

        def quarantine_blocks(self, blocks: tuple[int, ...]) -> None:
            self.quarantined += blocks

    w, _ = isolate_world()
    engine = Engine()
    adapter = ns["MyAdapter"](engine, w.manager)  # type: ignore[operator]
    a = Req(1, [5, 6, 7, 8], [1, 2, 3])
    adapter.took("a", a.slots)
    w.forward([(a, 0, 3)])
    w.step()
    w.k[2, 0, 0] += 1.0
    a.slots.append(4)
    adapter.took("a", [4])
    w.forward([(a, 3, 1)])
    w.step()
    w.step()
    assert list(engine.failed) == ["a"] and engine.failed["a"].startswith("kv-canary: request a failed")
    assert engine.failed["a"].endswith(f"[{FAILURE_CODES['verify']} KVCANARY-CORRUPT-READ; run `kvcanary explain "
                                       f"{FAILURE_CODES['verify']}`]")
    assert engine.quarantined == [2]

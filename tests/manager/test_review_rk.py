"""Review rK (session 13): bad input to the engine-facing manager and guard API. Each test states what the
promise asks ("a clear error naming the argument and the rule, raised before anything changes; a later good
call works as if the bad one never happened"); each failed before fK's fixes (what it did is noted as "was")."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from kvcanary.consts import CanaryMode, RealKvHashMode
from kvcanary.guard.decision import RequestFailure
from kvcanary.guard.followup import quarantined_failure
from kvcanary.guard.policy import ViolationPolicy
from kvcanary.manager import CanaryBatch, CanaryConfig, CanaryManager, ExpectedTokens
from kvcanary.manager.sweep import SweepEntries
from tests.manager.graph_parity import device_buffers
from tests.manager.test_guard import Recorder
from tests.manager.world import Req, World, make_world, t64


def _config(**changes: Any) -> CanaryConfig:
    cfg = CanaryConfig(real_kv_mode=RealKvHashMode.ALL, enable_v=True, enable_verify_token=True,
                       health_warmup_steps=3, health_every=1)
    return dataclasses.replace(cfg, **changes)


def _started(**changes: Any) -> tuple[World, Req]:
    """A world whose first request prefilled five tokens and whose step ended; its next slot is 6."""
    w = make_world(config=_config(**changes))
    a = Req(1, list(range(100, 130)), list(range(1, 6)))
    w.forward([(a, 0, 5)])
    w.step()
    a.slots.append(6)
    return w, a


def _buffers(m: CanaryManager) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in device_buffers(m).items()}


def _changed(before: dict[str, torch.Tensor], m: CanaryManager) -> list[str]:
    return [k for k, v in device_buffers(m).items() if not torch.equal(before[k], v)]


def _error(call: Callable[[], object]) -> BaseException | None:
    try:
        call()
    except Exception as err:  # the test looks at which error, not only that one came
        return err
    return None


# -- head(batch): the batch prepare() accepted, and no other -------------------------------------------------
def test_head_refuses_a_batch_other_than_the_one_prepare_accepted() -> None:
    w, a = _started()
    m = w.manager
    good = w.build([(a, 5, 1)])
    n = 40  # past write_token_capacity (32): prepare would have refused it with KVC-M code
    other = CanaryBatch(req_pool_indices=t64([1]), prefix_lens=t64([0]), extend_lens=t64([n]),
                        input_ids=t64([5] * n), positions=t64(list(range(n))), out_cache_loc=t64([3] * n),
                        expected_tokens=ExpectedTokens.from_lists([[5] * n]))
    m.prepare(good)
    before = _buffers(m)
    err = _error(lambda: m.head(other))
    assert isinstance(err, ValueError) and "head(batch)" in str(err) and "prepare" in str(err), repr(err)
    assert _changed(before, m) == []  # today: the HEAD verify ran (kernel_run_counters) before the error
    m.head(good)  # today: "head() called without prepare()": the bad head consumed the prepare
    w.write_kv(good.out_cache_loc.tolist())
    m.tail()


def test_head_refuses_a_batch_whose_snapshot_prepare_never_scattered() -> None:
    w, a = _started()
    m = w.manager
    good = w.build([(a, 5, 1)])
    bare = CanaryBatch(req_pool_indices=good.req_pool_indices, prefix_lens=good.prefix_lens,
                       extend_lens=good.extend_lens, input_ids=good.input_ids, positions=good.positions,
                       out_cache_loc=good.out_cache_loc)  # no expected tokens, and the token check is on
    m.prepare(good)
    before = _buffers(m)
    with pytest.raises(ValueError, match=r"head\(batch\).*prepare"):  # was: verified against good's snapshot
        m.head(bare)
    assert _changed(before, m) == []
    m.head(good)  # the refused head left the prepare in place
    w.write_kv(good.out_cache_loc.tolist())
    m.tail()
    m.end_step()
    assert m.events == []


# -- the config after attach ----------------------------------------------------------------------------
@pytest.mark.parametrize(("change", "forward_index", "name"), [
    ({"enable_verify_token": True}, 0, "enable_verify_token"),  # was: AssertionError in _scatter_expected
    ({"num_forward_slots": 3}, 2, "num_forward_slots"),  # was: IndexError in prepare
    ({"backend": "torch_ref"}, 0, "backend"),  # was: the runners kept the old one, the scatter took the new
    ({"ring_capacity": 7}, 0, "ring_capacity"),  # was: the stats read the new size of a ring still the old size
    ({"health_every": 1000}, 0, "health_every"),  # was: silently ignored (the watchdog was built at attach)
], ids=["verify_token", "forward_slots", "backend", "ring", "health"])
def test_a_config_replaced_after_attach_is_refused_naming_the_setting(change: dict[str, Any],
                                                                      forward_index: int, name: str) -> None:
    w, a = _started(enable_verify_token=False)
    m = w.manager
    batch = w.build([(a, 5, 1)])
    attached = m.config

    def replace_then_prepare() -> None:
        m.config = dataclasses.replace(m.config, **change)
        m.prepare(batch, forward_index=forward_index)

    err = _error(replace_then_prepare)  # the assignment refuses it
    assert isinstance(err, ValueError), repr(err)
    assert f"config.{name} is fixed at attach" in str(err)
    assert m.config is attached
    with m.forward(batch):  # the manager goes on with the settings it was attached with
        w.write_kv(batch.out_cache_loc.tolist())
    w.step()
    assert m.events == []


def test_a_config_that_changes_only_what_each_step_reads_is_taken() -> None:
    """``stats_every`` and the policy between log and isolate are read per step: a new value takes effect; a
    switch to raise (the reporter logs, as attached) or to mode NONE is refused by name, as is another type."""
    w, _ = _started()
    m = w.manager
    policies = []
    m.config = dataclasses.replace(m.config, stats_every=1, on_violation=ViolationPolicy.ISOLATE)
    policies.append(m.policy)
    m.config = dataclasses.replace(m.config, on_violation=None)
    policies.append(m.policy)
    assert m.config.stats_every == 1 and policies == [ViolationPolicy.ISOLATE, ViolationPolicy.LOG]
    taken = m.config
    for bad, rule in ((dataclasses.replace(m.config, on_violation=ViolationPolicy.RAISE), "on_violation"),
                      (dataclasses.replace(m.config, mode=CanaryMode.RAISE), "raise policy is fixed at attach"),
                      (dataclasses.replace(m.config, mode=CanaryMode.NONE), "config.mode is NONE")):
        with pytest.raises(ValueError, match=rule):
            m.config = bad
    with pytest.raises(TypeError, match="config must be a CanaryConfig"):
        m.config = {"stats_every": 1}  # type: ignore[assignment]
    assert m.config is taken


# -- callables handed to the manager ----------------------------------------------------------------------
def test_set_sweep_source_refuses_what_cannot_be_called() -> None:
    w = make_world(config=_config(sweep_interval=2))
    with pytest.raises(TypeError, match="source"):  # today: accepted; the due end_step raises "'int' object
        w.manager.set_sweep_source(42)  # type: ignore[arg-type]  # is not callable" after the step ended


def test_add_head_observer_refuses_what_cannot_be_called() -> None:
    w, a = _started()
    m = w.manager
    err = _error(lambda: m.add_head_observer(42))  # type: ignore[arg-type]
    if err is None:  # today: accepted, and the next head raises after its HEAD launches wrote the records
        batch = w.build([(a, 5, 1)])
        m.prepare(batch)
        before = _buffers(m)
        err = _error(lambda: m.head(batch))
        assert _changed(before, m) == []
    assert isinstance(err, TypeError) and "observe" in str(err)


def test_run_sweep_refuses_entries_of_another_type_naming_sweep_entries() -> None:
    w = make_world(config=_config(sweep_interval=2))
    with pytest.raises(TypeError, match=r"run_sweep\(entries\) must get SweepEntries .*got list"):
        w.manager.run_sweep([1, 2, 3])  # type: ignore[arg-type]  # was: 'list' object has no attribute 'validate'
    assert w.manager.sweep_passes == 0
    assert w.manager.run_sweep(SweepEntries.from_lists([], [], [])) == 0
    assert w.manager.sweep_passes == 1


def test_a_sweep_source_returning_another_type_is_named_in_the_error() -> None:
    """Asked by run_sweep: a TypeError naming the source's return. Asked by a due end_step: the step still ends
    (read-back, step count), then the error is raised; the source is asked again at the next due step."""
    w = make_world(config=_config(sweep_interval=2))
    asked: list[int] = []

    def walker() -> SweepEntries:
        asked.append(w.manager.step)
        return [1, 2, 3]  # type: ignore[return-value]
    w.manager.set_sweep_source(walker)
    with pytest.raises(TypeError, match=r"sweep source must return SweepEntries .*got list from"):
        w.manager.run_sweep()
    with pytest.raises(TypeError, match="sweep source must return SweepEntries"):
        w.manager.end_step()
    assert w.manager.step == 1 and w.manager.sweep_passes == 0
    w.manager.end_step()  # not due: the source is not asked
    assert asked == [0, 0]


# -- settings only checked at the first launch --------------------------------------------------------------
@pytest.mark.parametrize("name", ["no-such-backend", " "], ids=["unknown", "blank"])
def test_attach_refuses_an_unregistered_backend(name: str) -> None:
    with pytest.raises(ValueError, match=r"CanaryConfig.backend=.* names no registered backend") as err:
        make_world(config=_config(backend=name))  # was: attached; the first prepare raised BackendError
    assert getattr(err.value, "code", None) == "KVC-M019"
    w = make_world(config=_config(backend="torch_ref"))  # a registered one attaches and runs
    w.forward([(Req(1, list(range(100, 130)), list(range(1, 6))), 0, 5)])
    w.step()
    assert w.manager.events == []


# -- integers: a bool or a float is no forward slot or size --------------------------------------------------
@pytest.mark.parametrize("index", [True, 1.0, False, 0.0, "0"], ids=["true", "float", "false", "zero", "str"])
def test_prepare_refuses_a_forward_index_that_is_no_int(index: object) -> None:
    w = make_world(config=_config(num_forward_slots=2))
    a = Req(1, list(range(100, 130)), list(range(1, 6)))
    batch = w.build([(a, 0, 5)])
    for call in (lambda: w.manager.prepare(batch, forward_index=index),  # type: ignore[arg-type]
                 lambda: w.manager.head(batch, forward_index=index),  # type: ignore[arg-type]
                 lambda: w.manager.tail(forward_index=index),  # type: ignore[arg-type]
                 lambda: w.manager.pinned_inputs(4, forward_index=index)):  # type: ignore[arg-type]
        err = _error(call)
        assert isinstance(err, TypeError) and "forward_index must be an int" in str(err), repr(err)
    assert w.manager._prepared == [False, False] and w.manager._checked == [None, None]
    assert all(r.pinned is None for r in w.manager._forwards)
    with w.manager.forward(batch, forward_index=1):  # a good call works as if the bad ones never happened
        w.write_kv(batch.out_cache_loc.tolist())
    w.step()
    assert w.manager.events == []


@pytest.mark.parametrize("size", [True, 2.5, "4", None], ids=["bool", "float", "str", "none"])
def test_pinned_inputs_refuses_a_size_that_is_no_int(size: object) -> None:
    w = make_world()
    with pytest.raises(TypeError, match=r"kv-canary: pinned inputs need an int size"):
        w.manager.pinned_inputs(size)  # type: ignore[arg-type]
    assert w.manager._forwards[0].pinned is None  # nothing made
    p = w.manager.pinned_inputs(4)
    with pytest.raises(TypeError, match=r"kv-canary: pinned inputs need an int size"):
        w.manager.pinned_inputs(size)  # type: ignore[arg-type]  # also once the slot's inputs exist
    with pytest.raises(ValueError, match="size >= 1"):
        w.manager.pinned_inputs(0)
    assert w.manager.pinned_inputs(4) is p and p.size == 4


@pytest.mark.parametrize("n", [True, 2.5, "2", np.int64(2)], ids=["bool", "float", "str", "numpy"])
def test_pinned_commit_refuses_a_count_that_is_no_int(n: object) -> None:
    p = make_world().manager.pinned_inputs(4)
    p.host()
    with pytest.raises(TypeError, match=r"commit\(n\) needs an int n"):  # was: accepted (2.5: flush raised)
        p.commit(n)  # type: ignore[arg-type]
    assert p.pending == 0
    p.commit(2)
    assert p.pending == 2


# -- call order -------------------------------------------------------------------------------------------
def test_end_step_between_head_and_tail_is_refused() -> None:
    w, a = _started()
    m = w.manager
    batch = w.build([(a, 5, 1)])
    m.prepare(batch)
    m.head(batch)
    step, copies, sweeps = m.step, m._pump.copies, m.sweep_passes
    with pytest.raises(RuntimeError, match=r"between head\(\) and tail\(\) of forward slot\(s\) \[0\]"):
        m.end_step()  # was: the step ended with this forward's TAIL unrun
    assert (m.step, m._pump.copies, m.sweep_passes) == (step, copies, sweeps)  # nothing advanced
    w.write_kv(batch.out_cache_loc.tolist())
    m.tail()  # the forward goes on as if the refused call never happened
    m.end_step()
    assert m.step == step + 1 and m.events == []


def test_a_forward_whose_model_raised_is_aborted_and_the_step_ends() -> None:
    """``manager.forward`` aborts the forward when its body raises; the step then ends, and the slot's next
    forward runs as usual. abort_forward on a slot with nothing open does nothing."""
    w, a = _started()
    m = w.manager
    batch = w.build([(a, 5, 1)])
    with pytest.raises(KeyError), m.forward(batch):
        raise KeyError("the model failed")
    with pytest.raises(RuntimeError, match="tail"):  # the aborted forward has no TAIL to run
        m.tail()
    with pytest.raises(RuntimeError, match="prepare"):  # nor a HEAD: its prepare was forgotten
        m.head(batch)
    m.end_step()
    m.abort_forward()
    w.write_kv(batch.out_cache_loc.tolist())  # the engine runs the forward again, whole
    with m.forward(batch):
        pass
    m.end_step()
    m.end_step()
    assert m.events == []


# -- the guard: what the adapter reports ---------------------------------------------------------------------
def test_report_failures_never_hands_the_sinks_one_request_twice() -> None:
    w = make_world()
    heard = Recorder()
    w.manager.add_sink(heard)
    f: RequestFailure = quarantined_failure("req-1", "block", [3], slot=3, step=0)
    g: RequestFailure = quarantined_failure("req-2", "block", [3], slot=3, step=0)
    err = _error(lambda: w.manager.report_failures([f, g, f], step=0))  # was: the monitor counted 3 failures
    assert isinstance(err, ValueError) and "'req-1' more than once" in str(err), repr(err)
    assert "req-2" not in str(err)
    assert heard.decisions == []  # no sink heard anything
    w.manager.report_failures([f, g], step=0)
    assert [d.failed_ids for d in heard.decisions] == [("req-1", "req-2")]


@pytest.mark.parametrize("value", [1, "yes", None], ids=["int", "str", "none"])
def test_end_step_and_flush_refuse_a_flag_that_is_no_bool(value: object) -> None:
    w, _ = _started()
    m = w.manager
    step = m.step
    with pytest.raises(TypeError, match=r"end_step\(stats=...\) must be True or False"):
        m.end_step(stats=value)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"flush\(during_step=...\) must be True or False"):
        m.flush(during_step=value)  # type: ignore[arg-type]
    assert m.step == step
    assert m.end_step(stats=False) is None and m.step == step + 1

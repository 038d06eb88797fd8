"""rM review of session 13's manager fixes (fK): abort_forward and the open-forward refusal (xfail: the bugs)."""

from __future__ import annotations

import pytest
import torch

from kvcanary.manager import CanaryBatch, VerifyBudget
from kvcanary.manager.forward import ForwardRunner
from tests.manager.test_review_rk import _buffers, _changed, _started
from tests.manager.test_rotation import RKV, layered_world
from tests.manager.world import Req


@pytest.mark.xfail(strict=True, reason="rM: an aborted forward's HEAD moved the budget's per-row count (seen) "
                                       "while the rotation's turn moves only at TAIL: windows meet one set")
@pytest.mark.parametrize("victim", [2, 3])
def test_aborted_forwards_keep_budget_and_rotation_in_step(victim: int) -> None:
    """The engine's model raises once per forward and the forward is run again (manager.forward aborts it).
    Without the aborts, a flip in layer 1 of any older slot is reported (test_rotation's budget test); with
    them, every completed forward is the second HEAD of its budget round, so each window meets one rotation
    set only, and a flip in the other set is never reported (24 forwards, far past G x the period)."""
    w = layered_world(2, 2, budget=VerifyBudget(max_entries=4, newest_per_request=2))
    m = w.manager
    req = Req(row=1, tokens=list(range(100, 160)), slots=list(range(1, 8)))
    w.forward([(req, 0, 7)])
    w.step()
    w.layers[2][req.slots[victim]].view(torch.uint8).reshape(-1)[0] ^= 0x10  # K of layer 1 only (set 1)
    for n in range(24):
        req.slots.append(20 + n)
        batch = w.build([(req, 7 + n, 1)])
        with pytest.raises(RuntimeError, match="the model failed"), m.forward(batch):
            raise RuntimeError("the model failed")
        w.forward([(req, 7 + n, 1)])
        w.step()
    hits = {slot for _, slot, bits in w.events() if bits & RKV}
    assert hits == {req.slots[victim]}, hits


def test_a_head_that_raises_inside_manager_forward_leaves_no_open_forward() -> None:
    """A HEAD observer (the TP digest) raises: ``with manager.forward(batch)`` raises it, and the step must
    still end (the contract of manager.forward: it aborts what it opened). Fixed: the HEAD call sits in its try."""
    w, a = _started()
    m = w.manager

    def observe(batch: CanaryBatch) -> None:
        raise ValueError("the digest failed")
    m.add_head_observer(observe)
    batch = w.build([(a, 5, 1)])
    with pytest.raises(ValueError, match="digest"), m.forward(batch):
        w.write_kv(batch.out_cache_loc.tolist())
    m.end_step()  # was refused: "end_step() called between head() and tail() of forward slot(s) [0]"


def test_head_after_a_refused_prepare_of_the_kept_batch_is_refused() -> None:
    """prepare(batch) passes; the engine grows the batch in place past write_token_capacity and prepares it
    again, which is refused (the capacity rule). The slot still counts as prepared and the batch is still the
    accepted object, so head(batch) launched on a batch no check accepted (HEAD, TAIL and the step's end all
    ran; fixed: prepare() clears the slot's prepared flag first). head() is refused, nothing changed."""
    w, a = _started()
    m = w.manager
    batch = w.build([(a, 5, 1)])
    m.prepare(batch)
    n = m.capacities.write_token_capacity + 3
    for t in (batch.input_ids, batch.positions, batch.out_cache_loc):
        t.resize_(n)
        t.fill_(5)
    batch.extend_lens.fill_(n)
    with pytest.raises(Exception, match="write_entry_capacity"):
        m.prepare(batch)
    before = _buffers(m)
    with pytest.raises(RuntimeError, match="prepare"):
        m.head(batch)
    assert _changed(before, m) == []


def test_a_tail_that_raises_inside_manager_forward_leaves_no_open_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TAIL raises (a launcher's error): ``with manager.forward(batch)`` raises it, and the step still ends."""
    w, a = _started()
    m = w.manager
    batch = w.build([(a, 5, 1)])

    def failing_tail(self: ForwardRunner) -> bool:
        raise RuntimeError("the TAIL failed")
    monkeypatch.setattr(ForwardRunner, "tail", failing_tail)
    with pytest.raises(RuntimeError, match="TAIL failed"), m.forward(batch):
        w.write_kv(batch.out_cache_loc.tolist())
    monkeypatch.undo()
    m.end_step()  # not refused: the forward was aborted

"""Review findings on the prefill→decode transfer (rG, session 12): each test states what the transfer API
should do and fails until it does (``xfail(strict=True)``: a fix turns it into an XPASS, which fails, so the
marker goes with the fix)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from kvcanary.consts import FailReason
from kvcanary.distributed import (
    ReceivedTransfer,
    TransferMessage,
    TransferVerifier,
    Wire,
    accept_transfer,
    make_message,
    pack_kv,
    unpack_kv,
    unpack_records,
)
from kvcanary.distributed.slots import entries
from kvcanary_contracts import ContractError
from tests.distributed.world import events
from tests.manager.test_rotation import LayeredWorld, layered_world
from tests.manager.world import Req, World, make_world

CPU = torch.device("cpu")
REAL_KV = int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)


def _prefilled(n: int = 6) -> tuple[World, Req]:
    rng = random.Random()
    w = make_world()
    req = Req(row=1, tokens=[rng.randrange(50_000) for _ in range(n + 1)], slots=rng.sample(range(1, 64), n))
    w.forward([(req, 0, n)])
    return w, req


def _snapshot(w: World) -> list[torch.Tensor]:
    return [t.clone() for _, t in w.manager.transfer_buffers()] + [w.k.clone(), w.v.clone()]


def _unchanged(w: World, before: list[torch.Tensor]) -> bool:
    after = [t for _, t in w.manager.transfer_buffers()] + [w.k, w.v]
    return all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_a_transfer_of_zero_slots_packs_to_an_empty_message() -> None:
    """A request whose whole prompt hit the receiver's prefix cache transfers nothing: the sender's
    ``make_message`` must give an empty message, not crash in a reshape (wire.py pack_kv)."""
    w, _ = _prefilled()
    assert tuple(pack_kv([w.k, w.v], []).shape) == (0, 2 * w.k[0].numel() * w.k.element_size())
    msg = make_message(w.manager, [w.k, w.v], torch.zeros(0, dtype=torch.int64))
    assert msg.num_slots == 0 and tuple(msg.records.shape) == (4, 0, 32)
    empty = torch.zeros(0, 4)  # a pool of no slots: the width comes from the shape, not from row 0
    unpack_kv([empty], [], torch.zeros(0, 16, dtype=torch.uint8))


def test_a_receiver_run_that_repeats_a_slot_raises_and_writes_nothing() -> None:
    src, req = _prefilled()
    dst = make_world()
    msg = make_message(src.manager, [src.k, src.v], req.slots)
    before = _snapshot(dst)
    dup = [40, 41, 41, 43, 44, 45]
    with pytest.raises(ValueError, match="slots"):
        accept_transfer(dst.manager, TransferVerifier(dst.manager, 16), [dst.k, dst.v], msg, dup)
    with pytest.raises(ValueError, match="slots"):
        unpack_records(dst.manager, msg.records, dup)
    with pytest.raises(ValueError, match="slots"):
        unpack_kv([dst.k, dst.v], dup, msg.kv)
    assert _unchanged(dst, before)


def test_a_suffix_run_that_names_its_predecessor_among_its_slots_raises() -> None:
    src, req = _prefilled()
    dst = make_world()
    msg = make_message(src.manager, [src.k, src.v], req.slots[3:])
    before = _snapshot(dst)
    with pytest.raises(ValueError, match="prev_slot"):
        accept_transfer(dst.manager, TransferVerifier(dst.manager, 16), [dst.k, dst.v], msg, [32, 50, 51],
                        first_position=3, prev_slot=32)
    assert _unchanged(dst, before)


@pytest.mark.parametrize("bad", ["one tensor", "a None", "a 0-d tensor"])
def test_layers_that_are_not_a_list_of_buffers_raise_naming_layers(bad: str) -> None:
    w, req = _prefilled()
    layers: Any = {"one tensor": w.k, "a None": [w.k, None], "a 0-d tensor": [torch.tensor(1.0)]}[bad]
    with pytest.raises((ValueError, TypeError), match="layers"):
        pack_kv(layers, req.slots[:2])


@pytest.mark.parametrize("bad", ["None", "kv a list"])
def test_accept_transfer_refuses_what_is_not_a_message(bad: str) -> None:
    dst = make_world()
    before = _snapshot(dst)
    kv: Any = [1]
    msg: Any = None if bad == "None" else TransferMessage(kv, torch.zeros(4, 1, 32, dtype=torch.uint8))
    with pytest.raises((ValueError, TypeError), match=r"msg|payload"):
        accept_transfer(dst.manager, TransferVerifier(dst.manager, 4), [dst.k, dst.v], msg, [1, 2])
    assert _unchanged(dst, before)


@pytest.mark.parametrize("bad", ["records of other slots", "records not uint8", "kv not uint8"])
def test_wire_send_refuses_a_message_whose_parts_disagree(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    src, req = _prefilled()
    msg = make_message(src.manager, [src.k, src.v], req.slots)
    sent: list[torch.Tensor] = []
    monkeypatch.setattr(torch.distributed, "send", lambda t, *_, **__: sent.append(t))
    wrong = {"records of other slots": TransferMessage(msg.kv[:4], msg.records),
             "records not uint8": TransferMessage(msg.kv, msg.records.view(torch.int64)),
             "kv not uint8": TransferMessage(msg.kv.view(torch.float32), msg.records)}[bad]
    with pytest.raises(ValueError, match=r"kv|records"):
        Wire(backend="gloo", device=CPU).send(wrong, dst=1)
    assert sent == []  # nothing reached the transport


def test_a_token_past_int64_is_refused_by_the_contract_naming_tokens() -> None:
    with pytest.raises(ContractError, match="tokens"):
        entries([5, 2**70], "tokens", CPU)


@pytest.mark.parametrize("case", ["no verifier", "empty run"])
def test_accept_transfer_checks_the_chain_start_and_tokens_on_every_call(case: str) -> None:
    dst = make_world()
    ver = None if case == "no verifier" else TransferVerifier(dst.manager, 4)
    slots = [1, 2] if case == "no verifier" else []
    empty = TransferMessage(torch.zeros(0, 128, dtype=torch.uint8), torch.zeros(4, 0, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="first_position"):
        accept_transfer(dst.manager, ver, [dst.k, dst.v], empty, slots, first_position=-3)
    with pytest.raises(ValueError, match="tokens"):
        accept_transfer(dst.manager, ver, [dst.k, dst.v], empty, slots, tokens=[1.5, 2.5])  # type: ignore[list-item]


def _rotated_sender(per_step: int, rng: random.Random, n: int = 6) -> tuple[LayeredWorld, Req, TransferMessage]:
    """A sender of six layer buffers rotated ``per_step`` a forward, one request of ``n`` tokens prefilled at
    random slots (nothing reported), and the message of those slots."""
    src = layered_world(3, per_step)
    req = Req(row=1, tokens=[rng.randrange(100) for _ in range(32)], slots=rng.sample(range(1, 64), n))
    src.forward([(req, 0, n)])
    src.step()
    assert src.events() == []
    return src, req, make_message(src.manager, list(src.layers), req.slots)


def test_a_flip_in_a_rotated_layer_is_reported_by_the_transfer_verify() -> None:
    rng = random.Random()
    n = 6
    src, req, msg = _rotated_sender(1, rng, n)  # 6 layer buffers, one per forward: 6 rotation sets
    kv = msg.kv.clone()
    width = kv.shape[1] // len(src.layers)
    layer, row = rng.randrange(2, len(src.layers)), rng.randrange(n)  # past K0, V0 (HEAD/TAIL's)
    kv[row, layer * width + rng.randrange(width)] ^= 0x10
    dst = layered_world(3, 1)
    slots = list(range(40, 40 + n))
    accept_transfer(dst.manager, TransferVerifier(dst.manager, 16), list(dst.layers), TransferMessage(kv, msg.records),
                    slots, tokens=req.tokens[:n])
    got = events(dst.manager)
    assert got and {(s, b) for _, s, b in got} == {(slots[row], REAL_KV)}


def test_a_clean_transfer_with_rotation_verifies_every_set_and_reports_nothing() -> None:
    """The rotation sets' verifies run on the transferred range (their counters move) and, the bytes intact,
    report nothing: each set's records fingerprint its own layers as they arrived."""
    n = 6
    _, req, msg = _rotated_sender(1, random.Random(), n)
    dst = layered_world(3, 1)
    ver = TransferVerifier(dst.manager, 4)  # two chunks of the run
    rot = dst.manager.rotations[0]
    assert rot is not None and len(ver.rotation_sets) == rot.num_sets == 6
    before = [int(s.context.kernel_run_counter.item()) for s in rot.sets]
    accept_transfer(dst.manager, ver, list(dst.layers), msg, list(range(40, 40 + n)), tokens=req.tokens[:n])
    assert events(dst.manager) == []
    assert [int(s.context.kernel_run_counter.item()) - b for s, b in zip(rot.sets, before, strict=True)] == [2] * 6


# -- the fixes' own cases: each refused call leaves the receiver untouched ------------------------------------------
@pytest.mark.parametrize("case", ["first_position", "tokens not integers", "tokens too short", "token past int64",
                                  "repeat as a tensor", "prev_slot in slots", "records of other slots",
                                  "msg not a message", "layers one tensor"])
def test_a_refused_transfer_leaves_the_receiver_untouched(case: str) -> None:
    """A real two-slot message, no verifier: each rule fires before the first write (a write would show)."""
    src, req = _prefilled()
    dst = make_world()
    msg = make_message(src.manager, [src.k, src.v], req.slots[:2])
    call: dict[str, Any] = {"msg": msg, "slots": [10, 11], "layers": [dst.k, dst.v]}
    changes: dict[str, dict[str, Any]] = {"first_position": {"first_position": -3},
        "tokens not integers": {"tokens": [1, 2.0]},
        "tokens too short": {"tokens": [1]},
        "token past int64": {"tokens": [1, -(2**64)]},
        "repeat as a tensor": {"slots": torch.tensor([11, 11], dtype=torch.int32)},
        "prev_slot in slots": {"slots": [10, 11], "first_position": 2, "prev_slot": 11},
        "records of other slots": {"msg": TransferMessage(msg.kv, msg.records[:, :1])},
        "msg not a message": {"msg": (msg.kv, msg.records)},
        "layers one tensor": {"layers": dst.k}}
    call.update(changes[case])
    name = {"first_position": "first_position", "prev_slot in slots": "prev_slot", "msg not a message": "msg",
            "records of other slots": "msg.records", "layers one tensor": "layers",
            "repeat as a tensor": "slots"}.get(case, "tokens")
    before = _snapshot(dst)
    with pytest.raises((TypeError, ValueError), match=name):
        accept_transfer(dst.manager, None, call.pop("layers"), call.pop("msg"), call.pop("slots"), **call)
    assert _unchanged(dst, before)
    got = accept_transfer(dst.manager, None, [dst.k, dst.v], msg, [10, 11], tokens=req.tokens[:2])
    assert got == ReceivedTransfer(2, 2) and not _unchanged(dst, before)  # the same call, corrected, writes


def test_a_good_message_goes_out_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """The message check passes what make_message builds, with records or without (manager None)."""
    src, req = _prefilled()
    sent: list[torch.Tensor] = []
    monkeypatch.setattr(torch.distributed, "send", lambda t, *_, **__: sent.append(t))
    wire = Wire(backend="gloo", device=CPU)
    wire.send(make_message(src.manager, [src.k, src.v], req.slots), dst=1)
    wire.send(make_message(None, [src.k, src.v], req.slots), dst=1)
    assert [tuple(t.shape) for t in sent] == [(5,), (6, 128), (4, 6, 32), (5,), (6, 128)]


def test_a_receiver_whose_rotation_sets_differ_refuses_rather_than_reports_transit_damage() -> None:
    """Six layer buffers: ``layer_rotation=4`` cuts them into sets of 4 and 2, ``layer_rotation=3`` into 3 and 3:
    the same number of rotation buffers, so the records message has the shape the receiver expects, but each
    set fingerprints other layers. The transfer verify on every rotation set then reports every transferred
    slot as damaged in transit (REAL_KV on the rotation's TAIL_K tag) though the bytes arrived intact. The
    message carries the sender's layout: the mismatch is refused before anything is written."""
    n = 6
    src, req, msg = _rotated_sender(4, random.Random(5), n)
    dst = layered_world(3, 3)
    r_src, r_dst = src.manager.rotations[0], dst.manager.rotations[0]
    assert r_src is not None and r_dst is not None and r_src.num_sets == r_dst.num_sets == 2
    before = [t.clone() for _, t in dst.manager.transfer_buffers()] + [t.clone() for t in dst.layers]
    with pytest.raises(ValueError, match="rotation"):
        accept_transfer(dst.manager, TransferVerifier(dst.manager, 16), list(dst.layers), msg,
                        list(range(40, 40 + n)), tokens=req.tokens[:n])
    after = [t for _, t in dst.manager.transfer_buffers()] + list(dst.layers)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert events(dst.manager) == []
    same = layered_world(3, 4)  # the sender's own layout: accepted, and clean
    accept_transfer(same.manager, TransferVerifier(same.manager, 16), list(same.layers), msg,
                    list(range(40, 40 + n)), tokens=req.tokens[:n])
    assert msg.rotation == (4, 2) and events(same.manager) == []


def test_the_wire_carries_the_rotation_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Wire.send`` sends the sender's rotation layout after the header and ``Wire.recv`` rebuilds the same
    message (the transport replayed in order through a list: the same tensors, the same layout)."""
    _, _, msg = _rotated_sender(4, random.Random(7), 4)
    sent: list[torch.Tensor] = []
    monkeypatch.setattr(torch.distributed, "send", lambda t, *_, **__: sent.append(t.clone()))
    wire = Wire(backend="gloo", device=CPU)
    wire.send(msg, dst=1)
    assert [tuple(t.shape) for t in sent[:2]] == [(5,), (2,)] and sent[1].tolist() == [4, 2]
    queue = list(sent)
    monkeypatch.setattr(torch.distributed, "recv", lambda t, *_, **__: t.copy_(queue.pop(0)))
    got = wire.recv(src=0)
    assert not queue and got.rotation == msg.rotation == (4, 2)
    assert torch.equal(got.kv, msg.kv) and torch.equal(got.records, msg.records)


@pytest.mark.parametrize("rotation", [(0,), (-1, 2), ("4",), [4, 2], (1, 1, 1, 1, 1)])
def test_a_message_with_a_bad_rotation_layout_is_refused(rotation: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``msg.rotation``: a tuple of positive ints, no more than the records' buffers; anything else is refused
    before the transport sees a byte."""
    src, req = _prefilled()
    good = make_message(src.manager, [src.k, src.v], req.slots)
    sent: list[torch.Tensor] = []
    monkeypatch.setattr(torch.distributed, "send", lambda t, *_, **__: sent.append(t))
    with pytest.raises(ValueError, match=r"msg\.rotation must be a tuple of positive ints"):
        Wire(backend="gloo", device=CPU).send(TransferMessage(good.kv, good.records, rotation), dst=1)
    assert sent == []



@pytest.mark.parametrize("receiver", ["another manager", "no manager"])
def test_a_verifier_of_another_manager_is_refused_before_writing(receiver: str) -> None:
    """The verifier reads its own manager's records: built on another manager than the one the call writes (or
    with no manager, whose records are dropped), it would verify records the message never reached and blame the
    transport. Refused before anything is written."""
    src, req = _prefilled()
    msg = make_message(src.manager, [src.k, src.v], req.slots)
    dst, other = make_world(), make_world()
    before = _snapshot(dst)
    with pytest.raises(ValueError, match="verifier must be built on manager"):
        accept_transfer(None if receiver == "no manager" else dst.manager, TransferVerifier(other.manager, 16),
                        [dst.k, dst.v], msg, list(range(10, 10 + len(req.slots))), tokens=req.tokens[:6])
    assert _unchanged(dst, before) and events(other.manager) == []

"""pack/unpack of records, the receiver's verify and the device digest, in one process (no group)."""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import pytest
import torch

from kvcanary.consts import FailReason
from kvcanary.distributed import (
    DigestAccumulator,
    TransferMessage,
    TransferVerifier,
    accept_transfer,
    fold_records,
    make_message,
    pack_kv,
    pack_records,
    packed_shape,
    transfer_entries,
    unpack_kv,
    unpack_records,
)
from kvcanary.distributed.exchange import compare
from kvcanary.hashing import MASK64, splitmix64, to_int64
from kvcanary.plans import VerifyPlan
from kvcanary_backends.torch_ref._hash import splitmix64 as splitmix64_tensor
from tests.distributed.world import events
from tests.manager.host_reads import no_host_reads
from tests.manager.world import Req, World, make_world


def _prefilled(n: int = 10) -> tuple[World, Req]:
    rng = random.Random()
    w = make_world()
    slots = rng.sample(range(1, 64), n)
    req = Req(row=1, tokens=[rng.randrange(50_000) for _ in range(n + 1)], slots=slots)
    w.forward([(req, 0, n)])
    return w, req


def test_relocated_records_verify_clean_and_decode_continues() -> None:
    src, req = _prefilled()
    dst = make_world()
    slots = random.sample(range(1, 63), len(req.slots))  # other slot numbers, other order
    packed = pack_records(src.manager, torch.tensor(req.slots))
    assert tuple(packed.shape) == packed_shape(src.manager, len(slots)) == (4, len(slots), 32)
    unpack_records(dst.manager, packed, torch.tensor(slots))
    unpack_kv([dst.k, dst.v], slots, pack_kv([src.k, src.v], req.slots))
    TransferVerifier(dst.manager, capacity=4).verify(slots, tokens=req.tokens[: len(slots)])
    assert events(dst.manager) == []
    free = next(s for s in range(1, 64) if s not in slots)
    dst.forward([(Req(row=2, tokens=req.tokens, slots=[*slots, free]), len(slots), 1)])
    assert events(dst.manager) == []


def test_flipped_kv_byte_is_a_real_kv_mismatch_at_the_receiver_slot() -> None:
    src, req = _prefilled()
    dst = make_world()
    msg = make_message(src.manager, [src.k, src.v], req.slots)
    i = random.randrange(len(req.slots))
    kv = msg.kv.clone()
    kv[i, 0] ^= 0x10
    slots = list(range(40, 40 + len(req.slots)))
    accept_transfer(dst.manager, TransferVerifier(dst.manager, 16), [dst.k, dst.v], TransferMessage(kv, msg.records),
                    slots)
    got = events(dst.manager)
    assert got and {(s, b) for _, s, b in got} == {(slots[i], int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH))}


def test_suffix_transfer_chains_onto_the_receivers_predecessor() -> None:
    src, req = _prefilled(12)
    dst = make_world()
    # the receiver already holds positions 0..4 (e.g. a prefix-cache hit): only 5..11 travel
    dst_slots = list(range(30, 42))
    unpack_records(dst.manager, pack_records(src.manager, torch.tensor(req.slots[:5])), torch.tensor(dst_slots[:5]))
    unpack_kv([dst.k, dst.v], dst_slots[:5], pack_kv([src.k, src.v], req.slots[:5]))
    msg = make_message(src.manager, [src.k, src.v], req.slots[5:])
    ver = TransferVerifier(dst.manager, 16)
    accept_transfer(dst.manager, ver, [dst.k, dst.v], msg, dst_slots[5:], first_position=5, prev_slot=dst_slots[4])
    assert events(dst.manager) == []
    # the wrong predecessor (another slot) breaks the chain at the first transferred slot
    ver.verify(dst_slots[5:], first_position=5, prev_slot=dst_slots[3])
    got = events(dst.manager)
    assert got and {s for _, s, _ in got} == {dst_slots[5]}
    assert all(b == int(FailReason.VERIFY_CHAIN_HASH_MISMATCH) for _, _, b in got)


def test_bad_messages_raise_and_write_nothing() -> None:
    src, req = _prefilled()
    dst = make_world()
    before = [t.clone() for _, t in dst.manager.transfer_buffers()] + [dst.k.clone(), dst.v.clone()]
    packed = pack_records(src.manager, torch.tensor(req.slots))
    with pytest.raises(ValueError, match="partial or mismatched"):
        unpack_records(dst.manager, packed[:, :-1], torch.tensor(list(range(30, 30 + len(req.slots)))))
    with pytest.raises(ValueError, match="uint8"):
        unpack_records(dst.manager, packed.view(torch.int64), torch.tensor(req.slots))
    with pytest.raises(ValueError, match="1-D"):
        pack_records(src.manager, torch.tensor([[1, 2]]))
    msg = make_message(src.manager, [src.k, src.v], req.slots)
    with pytest.raises(ValueError, match="at most"):
        accept_transfer(dst.manager, None, [dst.k, dst.v], msg, list(range(30, 33)))
    # each of these fails only after the message itself checked out: still nothing is written
    dst_slots = list(range(30, 30 + len(req.slots)))
    ver = TransferVerifier(dst.manager, 16)
    late: list[tuple[dict[str, Any], str]] = [
        ({"first_position": 3}, "prev_slot must name the slot of position 2"),
        ({"tokens": req.tokens[:3]}, "tokens has 3 entries"),
        ({"tokens": [1.5] * len(req.slots)}, r"tokens\[0\] must be an integer"),
        ({"slots": [0, *dst_slots[1:]]}, r"slots must hold slots in \[1, 64\)"),
        ({"slots": [*dst_slots[:-1], 64]}, r"slots must hold slots in \[1, 64\)"),
        ({"slots": torch.tensor(dst_slots, dtype=torch.float32)}, "slots must be a 1-D integer tensor"),
        ({"msg": TransferMessage(msg.kv, msg.records.view(torch.int8))}, r"msg\.records must be a uint8 tensor"),
        ({"msg": TransferMessage(msg.kv[:, :-1], msg.records)}, "KV payload has shape"),
    ]
    for change, error in late:
        kw: dict[str, Any] = {"msg": msg, "slots": dst_slots, **change}
        with pytest.raises(ValueError, match=error):
            accept_transfer(dst.manager, ver, [dst.k, dst.v], kw.pop("msg"), kw.pop("slots"), **kw)
    after = [t for _, t in dst.manager.transfer_buffers()] + [dst.k, dst.v]
    assert all(torch.equal(a, t) for a, t in zip(before, after, strict=True))
    assert ver.verified == 0
    with pytest.raises(ValueError, match="prev_slot"):
        transfer_entries([3, 4], 2)
    with pytest.raises(ValueError, match="chain head"):
        transfer_entries([3, 4], 0, prev_slot=7)


def test_device_splitmix_matches_the_host_hash() -> None:
    xs = [random.getrandbits(64) for _ in range(64)] + [0, MASK64, 1 << 63]
    got = splitmix64_tensor(torch.tensor([to_int64(x) for x in xs], dtype=torch.int64)).tolist()
    assert got == [to_int64(splitmix64(x)) for x in xs]


def test_fold_sees_any_record_field_and_skips_padding() -> None:
    w, req = _prefilled()
    buf = w.manager.groups[0].k_head
    loc = torch.tensor([0, *req.slots, -1])
    base = fold_records(buf, loc)
    assert int(base[1]) == len(req.slots)
    assert torch.equal(base, fold_records(buf, torch.tensor(list(reversed(req.slots)))))  # order-free
    for field in range(3):  # token, position, prev_hash; real_kv_hash (field 3) is per rank, not folded
        b = buf.clone()
        b.view(torch.int64)[req.slots[0], field] += 1
        assert not torch.equal(fold_records(b, loc), base)
    b = buf.clone()
    b.view(torch.int64)[req.slots[0], 3] += 1
    assert torch.equal(fold_records(b, loc), base)


def test_compare_names_the_minority_or_the_ranks_off_rank_0() -> None:
    assert compare(3, [(1, 2, 0)] * 4) is None
    d = compare(3, [(1, 2, 0), (1, 2, 0), (9, 2, 0), (1, 2, 0)])
    assert d is not None and d.ranks == (2,) and d.reference == "majority"
    d = compare(5, [(1, 2, 0), (7, 2, 0)])
    assert d is not None and d.ranks == (1,) and d.reference == "rank 0" and "rank 1 differs" in d.message()
    d = compare(5, [(7, 2, 3), (1, 2, 0)])  # no majority: the rank with its own violations is named
    assert d is not None and d.ranks == (0,) and "from the ranks without violations" in d.message()


def test_the_digest_reads_nothing_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-forward digest (the TP observer on the HEAD) may run inside a captured forward."""
    w, req = _prefilled()
    buf = w.manager.groups[0].k_head
    acc = DigestAccumulator(buf)
    loc = torch.tensor([*req.slots, 0, -1])
    with no_host_reads(monkeypatch):
        acc.add(loc)
        acc.add(loc)
    assert torch.equal(acc.acc, 2 * fold_records(buf, loc))
    out = torch.zeros(3, dtype=torch.int64)
    acc.take(out)
    assert torch.equal(out[:2], 2 * fold_records(buf, loc)) and int(acc.acc.abs().sum()) == 0


def test_slots_and_layers_are_checked_before_anything_moves() -> None:
    src, _ = _prefilled()
    with pytest.raises(ValueError, match=r"slots must hold slots in \[1, 64\)"):
        pack_records(src.manager, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"\[1, 64\)"):
        unpack_records(src.manager, pack_records(src.manager, torch.tensor([2, 3])), torch.tensor([5, 64]))
    with pytest.raises(ValueError, match="at least one"):
        pack_kv([], [1])
    with pytest.raises(ValueError, match=r"layers\[1\]"):
        pack_kv([src.k, src.v[:10]], [1])
    with pytest.raises(ValueError, match="uint8"):
        unpack_kv([src.k], [1], torch.zeros(1, 64))
    before = src.k.clone()
    with pytest.raises(ValueError, match="KV payload has shape"):
        unpack_kv([src.k], [1, 2], torch.zeros(1, 64, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"slots must hold slots in \[1, 64\)"):
        pack_kv([src.k], [0])  # the padding slot
    with pytest.raises(ValueError, match=r"slots must hold slots in \[1, 64\) .* got values in \[-1, 5\]"):
        unpack_kv([src.k], [5, -1], torch.zeros(2, 64, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"slots\[1\] must be an integer, got float"):
        pack_records(src.manager, [3, 4.0])  # type: ignore[list-item]
    assert torch.equal(before, src.k)
    assert torch.equal(pack_kv([src.k], deque([3, 4])), pack_kv([src.k], torch.tensor([3, 4], dtype=torch.int32)))


def test_device_slots_and_tokens_verify_like_host_lists() -> None:
    """A run given as tensors (what an engine holds) is verified exactly as the same run given as lists,
    chunked or not; a predecessor inside the run crosses the chunk boundary."""
    src, req = _prefilled(11)
    dst = make_world()
    slots = random.sample(range(1, 63), len(req.slots))
    unpack_records(dst.manager, pack_records(src.manager, torch.tensor(req.slots)), torch.tensor(slots))
    unpack_kv([dst.k, dst.v], slots, pack_kv([src.k, src.v], req.slots))
    tokens = req.tokens[: len(slots)]
    seen = 0
    for capacity in (4, 16):
        ver = TransferVerifier(dst.manager, capacity=capacity)
        ver.verify(torch.tensor(slots), tokens=torch.tensor(tokens, dtype=torch.int32))
        ver.verify(torch.tensor(slots[3:]), first_position=3, prev_slot=slots[2])
        assert events(dst.manager)[seen:] == []
        wrong = list(tokens)
        wrong[5] += 1
        ver.verify(slots, tokens=wrong)
        by_list = events(dst.manager)[seen:]
        seen += len(by_list)
        ver.verify(torch.tensor(slots), tokens=torch.tensor(wrong))
        assert by_list and events(dst.manager)[seen:] == by_list
        seen += len(by_list)
        assert {s for _, s, _ in by_list} == {slots[5]}


def test_bad_tensor_runs_raise_naming_the_argument() -> None:
    dst = make_world()
    ver = TransferVerifier(dst.manager, capacity=4)
    with pytest.raises(ValueError, match="slots must be a 1-D integer tensor"):
        ver.verify(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="tokens must be a 1-D integer tensor"):
        ver.verify(torch.tensor([1, 2]), tokens=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="tokens has 1 entries, slots has 2"):
        ver.verify(torch.tensor([1, 2]), tokens=torch.tensor([1]))
    assert ver.verified == 0


def test_tensor_runs_are_planned_without_reading_a_value_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan of a tensor run is built by device copies only: every way to read a tensor's value on the
    host raises while the verifier plans (the launches are recorded, not run)."""
    import kvcanary.distributed.verify as verify_module

    dst = make_world()
    plans: list[tuple[torch.Tensor, list[torch.Tensor]]] = []

    def record(*, plan: VerifyPlan, **_: object) -> None:
        fields = (plan.verify_slot_indices, plan.verify_expected_positions, plan.verify_prev_slot_indices,
                  plan.verify_expected_tokens)
        plans.append((plan.verify_num_valid.clone(), [t.clone() for t in fields]))

    monkeypatch.setattr(verify_module, "launch_canary_verify_kernel", record)
    ver = TransferVerifier(dst.manager, capacity=3)
    slots, tokens = torch.tensor([7, 9, 4, 12, 5]), torch.tensor([70, 90, 40, 120, 50])
    with no_host_reads(monkeypatch):
        ver.verify(slots, first_position=2, prev_slot=3, tokens=tokens)
    got = [[t[: int(n[0])].tolist() for t in fields] for n, fields in plans[:: len(ver.endpoints)]]
    assert got == [[[7, 9, 4], [2, 3, 4], [3, 7, 9], [70, 90, 40]],
                   [[12, 5], [5, 6], [4, 12], [120, 50]]]

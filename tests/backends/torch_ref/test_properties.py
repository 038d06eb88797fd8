"""Properties over random valid inputs: written chains verify clean; one flip gives exactly its bits."""

from __future__ import annotations

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import kvcanary as kc
from tests.backends.torch_ref._world import World
from tests.backends.torch_ref.test_hand import CHAIN, POS, RKV, VTOK

Request = tuple[list[int], list[int]]  # slots, tokens (positions are 0..n-1)


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[Request], list[int], int]:
    nreq = draw(st.integers(1, 4))
    lens = [draw(st.integers(1, 7)) for _ in range(nreq)]
    slots = draw(st.permutations(list(range(1, 40))))[: sum(lens)]
    reqs, k = [], 0
    for n in lens:
        reqs.append((slots[k : k + n], [draw(st.integers(0, 2**31)) for _ in range(n)]))
        k += n
    cuts = [draw(st.integers(1, max(1, len(r[0])))) for r in reqs]  # chunked prefill: first chunk length
    mode = draw(st.sampled_from(list(kc.RealKvHashMode)))
    return reqs, cuts, int(mode)


def build(reqs: list[Request], cuts: list[int], mode: int) -> World:
    w = World(num_slots=40, mode=kc.RealKvHashMode(mode), ring=256)
    first = [(-1, s[:c], t[:c], list(range(c))) for (s, t), c in zip(reqs, cuts, strict=True)]
    w.write(first)
    second = [(s[c - 1], s[c:], t[c:], list(range(c, len(s)))) for (s, t), c in zip(reqs, cuts, strict=True)]
    w.write(second)
    return w


def plan_entries(reqs: list[Request]) -> list[tuple[int, int, int, int]]:
    return [(s, slots[k - 1] if k else -1, k, toks[k]) for slots, toks in reqs for k, s in enumerate(slots)]


@settings(max_examples=60, deadline=None)
@given(chains())
def test_written_chains_verify_clean(data: tuple[list[Request], list[int], int]) -> None:
    w = build(*data)
    assert w.take() == []
    buf = w.ctx.canary_buf.clone()
    w.verify(plan_entries(data[0]), check=True)
    assert w.take() == []
    assert torch.equal(buf, w.ctx.canary_buf), "verify never writes the canary buffer"


@settings(max_examples=120, deadline=None)
@given(chains(), st.sampled_from(["token", "position", "prev_hash", "real_kv_hash", "kv_byte"]), st.data())
def test_one_flip_gives_exactly_its_bits(data: tuple[list[Request], list[int], int], what: str, d: st.DataObject) -> None:
    reqs, cuts, mode = data
    assume(what not in ("real_kv_hash", "kv_byte") or mode != kc.RealKvHashMode.NONE)  # no fingerprint to flip
    w = build(reqs, cuts, mode)
    w.take()
    r = d.draw(st.integers(0, len(reqs) - 1))
    slots, _ = reqs[r]
    k = d.draw(st.integers(0, len(slots) - 1))
    s = slots[k]
    field = {"token": 0, "position": 1, "prev_hash": 2, "real_kv_hash": 3}.get(what)
    if field is not None:
        w.records[s, field] ^= 1 << d.draw(st.integers(0, 62))
    else:
        window = 16 if mode == kc.RealKvHashMode.PARTIAL else 32
        w.kv[s, d.draw(st.integers(0, window - 1))] ^= 1 << d.draw(st.integers(0, 7))
    w.verify(plan_entries(reqs), check=True)
    got = {v.slot_idx: v.fail_reason_bits for v in w.take()}
    succ = slots[k + 1] if k + 1 < len(slots) else None
    want: dict[int, int] = {
        "token": {s: VTOK},
        "position": {s: POS},
        "prev_hash": {s: CHAIN},
        "real_kv_hash": {s: RKV},
        "kv_byte": {s: RKV},
    }[what]
    if succ is not None and what in ("token", "position", "prev_hash"):
        want[succ] = CHAIN  # the successor's link hashes this record's token, position and prev_hash
    assert got == want


@settings(max_examples=40, deadline=None)
@given(chains())
def test_write_touches_only_the_written_records(data: tuple[list[Request], list[int], int]) -> None:
    reqs, _, mode = data
    w = World(num_slots=40, mode=kc.RealKvHashMode(mode))
    w.ctx.canary_buf.copy_(torch.randint(0, 256, w.ctx.canary_buf.shape, dtype=torch.uint8))
    before = w.ctx.canary_buf.clone()
    w.write([(-1, s, t, list(range(len(s)))) for s, t in reqs])
    written = {x for s, _ in reqs for x in s}
    changed = {i for i in range(40) if not torch.equal(before[i], w.ctx.canary_buf[i])}
    assert changed <= written

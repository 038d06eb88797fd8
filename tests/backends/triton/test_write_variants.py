"""The Triton write's latency variants (``TUNING["write_variant"]`` bits; write.py's docstring): every variant
must leave torch_ref's records, ring rows and counters.

Cases: decode-shaped writes (one token a request or none, so request ``r``'s token is often, not always, at index
``r``) with real-KV off and PARTIAL over 1, 2 and 4 sources, realistic and hostile; requests whose last tile holds
one token (``TILE + 1`` and ``2 * TILE + 1`` tokens), where the lean chain takes over from the serial loop mid-way;
and one-token requests whose strips lie past a source. Inputs are fresh each run (``KVCANARY_TEST_SEED`` reproduces
one).
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
import zlib

import pytest
import torch

import kvcanary as kc
from kvcanary.registry import Op
from kvcanary.testing.builders import Call, Device, Kwargs, context, context_outputs, write_kwargs, write_plan
from kvcanary.testing.parity import check_call
from kvcanary_backends.triton._jit import TUNING
from tests.backends.triton._support import device
from tests.backends.triton.test_write_chain_fold import TOKEN_ARGS, Recorder, launches, short_source_decode
from tools.scenarios import kv_sources, large_write_call

DEV = device()
SEED = int(os.environ.get("KVCANARY_TEST_SEED", time.time_ns() % 2**32))
VARIANTS = [0, 1, 2, 3, 4, 7]
__all__ = ["launches"]  # the fixture, imported for the tests below


def decode_shaped(call: Call) -> Call:
    """``call`` cut to as many tokens as requests (each has 0 or 1): a decode-shaped write."""

    def make(dev: Device) -> Kwargs:
        kw = call.make(dev)
        rows = int(kw["plan"].write_seed_slot_indices.shape[0])
        for name in TOKEN_ARGS:
            if kw[name] is not None:
                kw[name] = kw[name][:rows].clone()
        return kw

    return dataclasses.replace(call, make=make, label=f"{call.label}, decode-shaped")


def check_consts(rec: Recorder, variant: int) -> None:
    """Every recorded launch ran ``variant``'s specialization."""
    assert rec.launches, "the write launched nothing"
    for grid, consts in rec.launches:
        assert consts["SEM"] == ("relaxed" if variant & 1 else "acq_rel"), (grid, consts)
        assert consts["LEAN"] == bool(variant & 2), (grid, consts)
        assert consts["GUESS"] == bool(variant & 4 and consts["CHAIN_FOLD"] and consts["PARTIAL"]), (grid, consts)


@pytest.mark.parametrize("hostile", [False, True], ids=["realistic", "hostile"])
@pytest.mark.parametrize("nsrc", [0, 1, 2, 4])
@pytest.mark.parametrize("variant", VARIANTS)
def test_decode_writes_match_torch_ref(variant: int, nsrc: int, hostile: bool, launches: Recorder,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TUNING, "write_variant", variant)
    seed = SEED + zlib.crc32(f"{nsrc}/{hostile}".encode())  # one input for every variant
    rng = random.Random(seed)
    bs = rng.choice([1, 6, 9]) if DEV.type != "cuda" else rng.choice([1, 8, 64, 300])
    mode = kc.RealKvHashMode.NONE if nsrc == 0 else kc.RealKvHashMode.PARTIAL
    call = decode_shaped(large_write_call(rng, requests=bs, length=1, vary=rng.random() < 0.5, sources=nsrc,
                                          mode=mode, assert_inputs=hostile, hostile=hostile, short_sources=hostile))
    problems = check_call(call, DEV, "triton")
    assert not problems, f"KVCANARY_TEST_SEED={SEED}: {problems}"
    check_consts(launches, variant)


@pytest.mark.parametrize("extra", [1, 2], ids=["tile+1", "2tiles+1"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_last_tile_of_one_token_matches_torch_ref(variant: int, extra: int, launches: Recorder,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TUNING, "write_variant", variant)
    rng = random.Random(SEED + extra)
    call = large_write_call(rng, requests=3, length=extra * TUNING["write_tile"] + 1, sources=rng.choice([0, 2]),
                            mode=kc.RealKvHashMode.PARTIAL, hostile=rng.random() < 0.5)
    problems = check_call(call, DEV, "triton")
    assert not problems, f"KVCANARY_TEST_SEED={SEED}: {problems}"
    check_consts(launches, variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_one_token_tiles_match_torch_ref(variant: int, launches: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    """A serial tile of one token (``write_tile`` 1): every tile holds one token, only the last is the request's
    last, so the lean chain's shortcut must not skip the hash of the others."""
    monkeypatch.setitem(TUNING, "write_variant", variant)
    monkeypatch.setitem(TUNING, "write_tile", 1)
    rng = random.Random(SEED + 20)
    call = large_write_call(rng, requests=2, length=3, sources=rng.choice([0, 2]), mode=kc.RealKvHashMode.PARTIAL)
    problems = check_call(call, DEV, "triton")
    assert not problems, f"KVCANARY_TEST_SEED={SEED}: {problems}"
    check_consts(launches, variant)


@pytest.mark.parametrize(("nsrc", "short"), [(1, 0), (4, 2)])
@pytest.mark.parametrize("variant", VARIANTS)
def test_strips_past_a_source_match_torch_ref(variant: int, nsrc: int, short: int, launches: Recorder,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TUNING, "write_variant", variant)
    rng = random.Random(SEED + 10 * nsrc + short)
    problems = check_call(short_source_decode(rng, nsrc, short, kc.RealKvHashMode.PARTIAL), DEV, "triton")
    assert not problems, f"KVCANARY_TEST_SEED={SEED}: {problems}"
    check_consts(launches, variant)


# Request rows of an uneven decode write (capacity 8, 6 valid, 8 tokens): request r's one token is at index r for
# rows 0, 1 and 5 (the guess holds); row 2 holds two tokens from index 2, row 3 one at index 4 (the guess would
# fold row 2's second token's strips), row 4 none; the padding rows 6 and 7 have one token each at their own index
# (the guess would hold) and must write nothing.
UNEVEN_OFFSETS = [0, 1, 2, 4, 5, 5, 6, 7, 8]


def uneven_decode(rng: random.Random, nsrc: int, slot1: str) -> Call:
    """The uneven decode write above over ``nsrc`` PARTIAL sources (the first 2 rows short), every token at a
    distinct slot (``slot1``: row 1's, "valid", "skipped" (-1) or "past" the buffer), seeds random."""
    num_slots = 24
    buf = torch.randint(0, 256, (num_slots, kc.CANARY_SLOT_BYTES), dtype=torch.uint8,
                        generator=torch.Generator().manual_seed(rng.randrange(2**31)))
    srcs = kv_sources(rng, num_slots, nsrc, short_rows=2)
    locs = rng.sample(range(num_slots), 8)
    locs[1] = {"valid": locs[1], "skipped": -1, "past": num_slots + 2}[slot1]
    seeds = [rng.choice([-1, rng.randrange(num_slots), num_slots + 3]) for _ in range(8)]
    ids = [rng.randrange(50000) for _ in range(8)]
    poss = [rng.randrange(1, 4) for _ in range(8)]

    def make(dev: Device) -> Kwargs:
        sources = [dataclasses.replace(s, tensor=s.tensor.to(dev, copy=True)) for s in srcs]
        ctx = context(canary_buf=buf.to(dev, copy=True), sources=sources, mode=kc.RealKvHashMode.PARTIAL, ring=64)

        def t(xs: list[int]) -> torch.Tensor:
            return torch.tensor(xs, dtype=torch.int64, device=dev)

        return write_kwargs(ctx, write_plan(UNEVEN_OFFSETS, seeds, num_valid=6, device=dev), t(ids), t(poss), t(locs))

    return Call(Op.WRITE, make, context_outputs, 0, label=f"uneven decode write, {nsrc} sources, row 1 {slot1}")


@pytest.mark.parametrize("slot1", ["valid", "skipped", "past"])
@pytest.mark.parametrize("nsrc", [1, 4])
@pytest.mark.parametrize("variant", VARIANTS)
def test_uneven_decode_offsets_match_torch_ref(variant: int, nsrc: int, slot1: str, launches: Recorder,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The guessed slot (bit 4) is used only where the offsets put the request's one token at its row's index."""
    monkeypatch.setitem(TUNING, "write_variant", variant)
    rng = random.Random(SEED + 30 + nsrc)
    problems = check_call(uneven_decode(rng, nsrc, slot1), DEV, "triton")
    assert not problems, f"KVCANARY_TEST_SEED={SEED}: {problems}"
    check_consts(launches, variant)
    assert [c["CHAIN_FOLD"] for _, c in launches.launches] == [True], launches.launches

"""The Triton write's chain fold: a decode-shaped write with sources launches one program per request row,
whose chain program folds its own tokens' strips; ``TUNING["write_chain_fold"] = 0`` keeps the fold programs.

Both layouts must leave torch_ref's records, ring rows and counters. Decode-shaped calls come from
``tools.scenarios.large_write_call`` (requests of 0 or 1 token, about half continuing a stamped chain) without
its padded tail, so that they have no more tokens than request rows; every launch is recorded to show which
layout ran. Forcing the chain fold onto the multi-token writes of ``tools.scenarios`` also runs it over several
tiles per request. Inputs are fresh each run (``KVCANARY_TEST_SEED`` reproduces one).
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
import zlib
from collections.abc import Hashable, Sequence
from typing import Any

import pytest
import torch

import kvcanary as kc
from kvcanary.registry import REGISTRY, Op
from kvcanary.sources import RealKvSource
from kvcanary.testing.builders import Call, Device, Kwargs, context, context_outputs, write_kwargs, write_plan
from kvcanary.testing.parity import check_call
from kvcanary_backends.triton import write as triton_write
from kvcanary_backends.triton._jit import TUNING
from tests.backends.triton._support import device
from tools.scenarios import fuzz, large_write_call

DEV = device()
SEED = int(os.environ.get("KVCANARY_TEST_SEED", time.time_ns() % 2**32))
CASES = 12 if DEV.type == "cuda" else 4
MODES = list(kc.RealKvHashMode)
TOKEN_ARGS = ("input_ids", "positions", "out_cache_loc", "expected_input_tokens", "expected_input_positions")


class Recorder:
    """Stands in for the write's launcher: records each launch's grid and constexprs, then launches it (never
    a prepared launch, so that every call is seen)."""

    def __init__(self, launcher: Any) -> None:
        self.launcher = launcher
        self.launches: list[tuple[tuple[int, ...], dict[str, Any]]] = []

    def __call__(self, grid: tuple[int, ...], key: Hashable, args: Sequence[Any], consts: tuple[Any, ...],
                 num_warps: int, **options: Any) -> None:
        self.launches.append((grid, dict(zip(self.launcher.const_names, consts, strict=True))))
        self.launcher(grid, key, args, consts, num_warps, **options)

    def prepare(self, *_args: Any, **_options: Any) -> None:
        return None


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder(triton_write._LAUNCH)
    monkeypatch.setattr(triton_write, "_LAUNCH", rec)
    REGISTRY.invalidate()  # no launch prepared by an earlier test replays past the recorder
    return rec


def decode_shaped(call: Call) -> Call:
    """``call`` without its padded tail: as many tokens as requests at most (each has 0 or 1)."""

    def make(dev: Device) -> Kwargs:
        kw = call.make(dev)
        rows = int(kw["plan"].write_seed_slot_indices.shape[0])
        for name in TOKEN_ARGS:
            if kw[name] is not None:
                kw[name] = kw[name][:rows].clone()
        assert kw["input_ids"].shape[0] <= rows
        return kw

    return dataclasses.replace(call, make=make, label=f"{call.label}, decode-shaped")


def test_the_chain_folds_in_decode_shaped_writes_with_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    assert triton_write.chain_folds(2, num_tokens=8, capacity=8)
    assert triton_write.chain_folds(4, num_tokens=1, capacity=1024)
    assert not triton_write.chain_folds(2, num_tokens=9, capacity=8)  # more tokens than rows: fold programs
    assert not triton_write.chain_folds(0, num_tokens=8, capacity=8)  # nothing to fold
    assert not triton_write.chain_folds(2, num_tokens=8, capacity=8, partial=False)  # ALL: fold programs
    monkeypatch.setitem(TUNING, "write_chain_fold_all", 1)
    assert triton_write.chain_folds(2, num_tokens=8, capacity=8, partial=False)
    monkeypatch.setitem(TUNING, "write_chain_fold", 0)
    assert not triton_write.chain_folds(2, num_tokens=8, capacity=8)


@pytest.mark.parametrize("chain_fold", [1, 0], ids=["chain-fold", "fold-programs"])
@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@pytest.mark.parametrize("nsrc", [1, 2, 4])
def test_decode_writes_match_torch_ref(nsrc: int, mode: kc.RealKvHashMode, chain_fold: int, launches: Recorder,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TUNING, "write_chain_fold", chain_fold)
    monkeypatch.setitem(TUNING, "write_chain_fold_all", chain_fold)  # ALL's chain fold too (off by default)
    seed = SEED + zlib.crc32(f"{nsrc}/{mode.name}".encode())  # one input for both layouts
    rng = random.Random(seed)
    bs = rng.choice([1, 5, 9]) if DEV.type != "cuda" else rng.choice([1, 8, 64, 300])
    call = decode_shaped(large_write_call(rng, requests=bs, length=1, vary=bs > 1, sources=nsrc, mode=mode,
                                          assert_inputs=rng.random() < 0.5, hostile=rng.random() < 0.5,
                                          short_sources=rng.random() < 0.5))
    problems = check_call(call, DEV, "triton")
    assert not problems, f"KVCANARY_TEST_SEED={SEED}: {problems}"
    assert launches.launches, "the write launched nothing"
    folds = mode != kc.RealKvHashMode.NONE and chain_fold == 1  # NONE launches with no sources
    for grid, consts in launches.launches:
        assert consts["CHAIN_FOLD"] == folds, (grid, consts)
        assert grid[1] == (1 if folds or mode == kc.RealKvHashMode.NONE else 2), grid


@pytest.mark.parametrize("hostile", [False, True], ids=["realistic", "hostile"])
def test_the_chain_fold_forced_on_any_write_matches_torch_ref(hostile: bool, launches: Recorder,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_write, "chain_folds", lambda num_sources, num_tokens, capacity, partial=True: num_sources > 0)
    seed = SEED + zlib.crc32(f"forced/{hostile}".encode())
    failures = fuzz(Op.WRITE, DEV, "triton", seed=seed, count=CASES, hostile=hostile)
    assert not failures, f"KVCANARY_TEST_SEED={SEED}: " + "\n".join(failures)
    # and surely with sources: requests of several tiles (and more tokens than rows)
    rng = random.Random(seed)
    mode = rng.choice([kc.RealKvHashMode.PARTIAL, kc.RealKvHashMode.ALL])
    call = large_write_call(rng, requests=3, length=3 * TUNING["write_tile"] + 1, vary=True, sources=rng.randint(1, 4),
                            mode=mode, assert_inputs=hostile, hostile=hostile, short_sources=hostile)
    launches.launches.clear()
    problems = check_call(call, DEV, "triton")
    assert not problems, f"KVCANARY_TEST_SEED={SEED}: {problems}"
    assert [c["CHAIN_FOLD"] for _, c in launches.launches] == [True], launches.launches


def short_source_decode(rng: random.Random, nsrc: int, short: int, mode: kc.RealKvHashMode) -> Call:
    """A decode write (one token a request) over ``nsrc`` sources of which source ``short`` lacks the last 6
    slots' strips, a few tokens there (a ring row each, folded as 0 for that source only), the rest spread over
    the buffer; seeds random records, none (-1) or past the buffer."""
    num_slots, bs = 40, 12
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    buf = torch.randint(0, 256, (num_slots, kc.CANARY_SLOT_BYTES), dtype=torch.uint8, generator=gen)
    strips = [torch.randint(0, 256, (num_slots - (6 if i == short else 0), 32), dtype=torch.uint8, generator=gen)
              for i in range(nsrc)]
    locs = rng.sample(range(1, num_slots - 6), bs - 3) + rng.sample(range(num_slots - 6, num_slots), 3)
    rng.shuffle(locs)
    seeds = [rng.choice([-1, rng.randrange(1, num_slots), num_slots + 2]) for _ in range(bs)]
    ids = [rng.randrange(50000) for _ in range(bs)]
    poss = [rng.randrange(1, 9) for _ in range(bs)]

    def make(dev: Device) -> Kwargs:
        sources = [RealKvSource(tensor=t.to(dev, copy=True), page_size=1, num_bytes_per_token=32, read_bytes=32)
                   for t in strips]
        ctx = context(canary_buf=buf.to(dev, copy=True), sources=sources, mode=mode, ring=64)

        def t(xs: list[int]) -> torch.Tensor:
            return torch.tensor(xs, dtype=torch.int64, device=dev)

        return write_kwargs(ctx, write_plan(list(range(bs + 1)), seeds, device=dev), t(ids), t(poss), t(locs))

    return Call(Op.WRITE, make, context_outputs, 0, label=f"decode write, source {short} of {nsrc} short, {mode.name}")


@pytest.mark.parametrize("mode", [kc.RealKvHashMode.PARTIAL, kc.RealKvHashMode.ALL], ids=["PARTIAL", "ALL"])
@pytest.mark.parametrize(("nsrc", "short"), [(1, 0), (2, 0), (2, 1), (4, 0), (4, 1), (4, 2), (4, 3)])
def test_strips_past_a_source_match_torch_ref(nsrc: int, short: int, mode: kc.RealKvHashMode,
                                              launches: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TUNING, "write_chain_fold_all", 1)  # ALL's chain fold too (off by default)
    rng = random.Random(SEED + 10 * nsrc + short + 100 * int(mode))
    problems = check_call(short_source_decode(rng, nsrc, short, mode), DEV, "triton")
    assert not problems, f"KVCANARY_TEST_SEED={SEED}: {problems}"
    assert [c["CHAIN_FOLD"] for _, c in launches.launches] == [True], launches.launches

"""Review probe: the chain fold on a decode-shaped (tokens <= rows) but hostile write: one request of several
tiles (a partial last tile) beside empty rows, slots -1 / other negatives / past the buffer, 4 sources with pages
and padded rows (the first short of the buffer), seeds past the buffer and INVALID, the input assert failing, a
ring that holds every row or overflows part-way. Both layouts against torch_ref."""

from __future__ import annotations

import random

import pytest
import torch

import kvcanary as kc
from kvcanary.registry import Op
from kvcanary.testing.builders import Call, Device, Kwargs, context, context_outputs, write_kwargs, write_plan
from kvcanary.testing.parity import check_call
from kvcanary_backends.triton import write as triton_write
from kvcanary_backends.triton._jit import TUNING
from tests.backends.triton._support import device
from tools.scenarios import kv_sources

DEV = device()


def hostile_decode(seed: int, mode: kc.RealKvHashMode, ring: int) -> Call:
    rng = random.Random(seed)
    tile = TUNING["write_tile"]
    cap = 3 * tile + 4
    long = 2 * tile + 3  # two full tiles and a partial one
    num_slots = long + 20  # room for every distinct slot the tiles take (the tile is the device's)
    gen = torch.Generator().manual_seed(seed)
    buf = torch.randint(0, 256, (num_slots, kc.CANARY_SLOT_BYTES), dtype=torch.uint8, generator=gen)
    srcs = kv_sources(rng, num_slots, 4, short_rows=3)
    good = rng.sample(range(1, num_slots), long + 3)
    locs = good[: long + 3]
    for i in rng.sample(range(long + 3), 8):  # hostile lanes anywhere, the last tile included
        locs[i] = rng.choice([-1, -1, -7, num_slots, num_slots + 9, 2**40])
    locs[long - 1] = num_slots - 1  # the last token of the long request: in the buffer, past the short source
    ntok = len(locs)
    assert ntok <= cap
    lengths = [0, long, 0, 0, 1, 0, 2] + [0] * (cap - 7)
    offs = [0]
    for n in lengths:
        offs.append(offs[-1] + n)
    seeds = [rng.choice([-1, num_slots + 1, -5, rng.randrange(1, num_slots)]) for _ in range(cap)]
    seeds[1] = rng.randrange(1, num_slots)
    ids = [rng.randrange(50000) for _ in range(ntok)]
    poss = [rng.randrange(0, 5) for _ in range(ntok)]
    etoks = [t if rng.random() < 0.7 else t + 1 for t in ids]

    def make(dev: Device) -> Kwargs:
        sources = [kc.RealKvSource(tensor=s.tensor.to(dev, copy=True), page_size=s.page_size,
                                   num_bytes_per_token=s.num_bytes_per_token, read_bytes=s.read_bytes) for s in srcs]
        ctx = context(canary_buf=buf.to(dev, copy=True), sources=sources, mode=mode, ring=ring, write_index=1)

        def t(xs: list[int]) -> torch.Tensor:
            return torch.tensor(xs, dtype=torch.int64, device=dev)

        return write_kwargs(ctx, write_plan(offs, seeds, device=dev), t(ids), t(poss), t(locs),
                            expected_tokens=t(etoks), expected_positions=t(poss))

    return Call(Op.WRITE, make, context_outputs, 1, label=f"hostile decode write {mode.name} ring {ring}",
                order_sensitive=False)


@pytest.mark.parametrize("chain_fold", [1, 0], ids=["chain-fold", "fold-programs"])
@pytest.mark.parametrize("ring", [256, 6])
@pytest.mark.parametrize("mode", [kc.RealKvHashMode.PARTIAL, kc.RealKvHashMode.ALL], ids=["PARTIAL", "ALL"])
def test_hostile_decode_write(mode: kc.RealKvHashMode, ring: int, chain_fold: int,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TUNING, "write_chain_fold", chain_fold)
    monkeypatch.setitem(TUNING, "write_chain_fold_all", chain_fold)  # ALL's chain fold too (off by default)
    call = hostile_decode(1234 + int(mode) + ring, mode, ring)
    kw = call.make("cpu")
    assert triton_write.chain_folds(4, kw["input_ids"].shape[0], kw["plan"].write_seed_slot_indices.shape[0]) \
        == bool(chain_fold)
    problems = check_call(call, DEV, "triton")
    assert not problems, problems


def extension_decode(seed: int, mode: kc.RealKvHashMode) -> Call:
    """A decode write with sources and both write-time extension checks on (write slot and owner)."""
    rng = random.Random(seed)
    num_slots, cap, rows, cols = 40, 12, 5, 16
    gen = torch.Generator().manual_seed(seed)
    buf = torch.randint(0, 256, (num_slots, kc.CANARY_SLOT_BYTES), dtype=torch.uint8, generator=gen)
    srcs = kv_sources(rng, num_slots, 3, short_rows=2)
    lengths = [rng.choice([0, 1, 1]) for _ in range(cap)]
    ntok = sum(lengths)
    locs = rng.sample(range(1, num_slots), ntok)
    for i in rng.sample(range(ntok), min(3, ntok)):
        locs[i] = rng.choice([-1, num_slots + 2])
    offs = [0]
    for n in lengths:
        offs.append(offs[-1] + n)
    seeds = [rng.choice([-1, num_slots + 1]) for _ in range(cap)]
    ids = [rng.randrange(50000) for _ in range(ntok)]
    poss = [rng.randrange(0, cols + 2) for _ in range(ntok)]
    rpi = [rng.randrange(rows) for _ in range(cap - 2)]  # the last two rows unchecked (past its end)
    r2t = torch.randint(0, num_slots, (rows, cols), dtype=torch.int32, generator=gen)
    for k, p in enumerate(poss):  # about half the tokens where req_to_token says
        r = next(i for i in range(cap) if offs[i] <= k < offs[i + 1])
        if r < len(rpi) and p < cols and rng.random() < 0.5 and locs[k] >= 0:
            r2t[rpi[r], p] = locs[k] if locs[k] < num_slots else 0
    owner = torch.tensor([rng.choice([-3, -1, *range(rows)]) for _ in range(num_slots)], dtype=torch.int64)

    def make(dev: Device) -> Kwargs:
        sources = [kc.RealKvSource(tensor=s.tensor.to(dev, copy=True), page_size=s.page_size,
                                   num_bytes_per_token=s.num_bytes_per_token, read_bytes=s.read_bytes) for s in srcs]
        ctx = context(canary_buf=buf.to(dev, copy=True), sources=sources, mode=mode, ring=128)

        def t(xs: list[int]) -> torch.Tensor:
            return torch.tensor(xs, dtype=torch.int64, device=dev)

        kw = write_kwargs(ctx, write_plan(offs, seeds, device=dev), t(ids), t(poss), t(locs))
        kw.update(req_pool_indices=t(rpi), req_to_token=r2t.to(dev), slot_owner=owner.to(dev),
                  extensions=kc.Extensions(write_slot_mismatch=True, write_slot_owner_mismatch=True))
        return kw

    return Call(Op.WRITE, make, context_outputs, 0, label=f"decode write with extensions {mode.name}")


@pytest.mark.parametrize("mode", [kc.RealKvHashMode.PARTIAL, kc.RealKvHashMode.ALL], ids=["PARTIAL", "ALL"])
@pytest.mark.parametrize("seed", [1, 2])
def test_chain_fold_with_extension_checks(mode: kc.RealKvHashMode, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TUNING, "write_chain_fold_all", 1)  # ALL's chain fold too (off by default)
    call = extension_decode(seed * 31 + int(mode), mode)
    kw = call.make("cpu")
    assert triton_write.chain_folds(3, kw["input_ids"].shape[0], kw["plan"].write_seed_slot_indices.shape[0])
    problems = check_call(call, DEV, "triton")
    assert not problems, problems

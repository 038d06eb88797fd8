"""Random but realistic launch inputs, for parity tests of every backend against ``torch_ref``.

Each generator draws one call with :class:`random.Random` and returns a :class:`Call`: a recipe that builds
fresh keyword arguments on any device (so every backend sees identical, unshared inputs) and names the
tensors the launch may change. Worlds are built like an engine builds them: chains of slots written with the
real hash, shared prefixes, padding rows, a partly filled ring; then some fraction is corrupted (fields,
KV bytes) and, when ``hostile`` is set, indices point outside their tensors.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kvcanary.consts import INVALID_SLOT, CanaryLaunchTag, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary.hashing import ANCHOR_HASH, real_kv_hash, record_hash, to_int64
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.registry import Op
from kvcanary.sources import RealKvSource

Device = torch.device | str


@dataclass
class Call:
    """One launch: how to build its arguments, and which of them it may change."""

    op: Op
    make: Callable[[Device], dict[str, Any]]
    outputs: Callable[[dict[str, Any]], dict[str, torch.Tensor]]
    ring_base: int | None = None
    order_sensitive: bool = False
    label: str = ""


# -- worlds ---------------------------------------------------------------------------------------------
@dataclass
class SourceSpec:
    data: torch.Tensor  # uint8 [rows, row_bytes]
    page_size: int
    nbpt: int
    read_bytes: int
    view_dtype: torch.dtype

    def strip(self, slot: int, mode: RealKvHashMode) -> bytes | None:
        row, col = divmod(slot, self.page_size)
        if row >= self.data.shape[0]:
            return None
        eff = 16 if mode == RealKvHashMode.PARTIAL else self.read_bytes
        start = col * self.nbpt
        return bytes(self.data[row, start : start + eff].tolist())

    def build(self, device: Device) -> RealKvSource:
        t = self.data.to(device)
        if self.view_dtype != torch.uint8:
            t = t.view(self.view_dtype)
        return RealKvSource(tensor=t, page_size=self.page_size, num_bytes_per_token=self.nbpt,
                            read_bytes=self.read_bytes)


@dataclass
class World:
    num_slots: int
    stride: int
    records: torch.Tensor  # int64 [num_slots, 4] (+ padding bytes kept in pad)
    pad: torch.Tensor  # uint8 [num_slots, stride - 32]
    sources: list[SourceSpec]
    mode: RealKvHashMode
    ring: torch.Tensor
    write_index: int
    kind: CanaryLaunchTag

    def canary_buf(self) -> torch.Tensor:
        body = self.records.contiguous().view(torch.uint8).reshape(self.num_slots, 32)
        return torch.cat([body, self.pad], dim=1).contiguous()

    def real_kv(self, slot: int) -> int:
        strips = [s.strip(slot, self.mode) for s in self.sources]
        if any(x is None for x in strips):
            return 0
        return to_int64(real_kv_hash([x for x in strips if x is not None], self.mode))

    def context(self, device: Device, *, slot_counter: int, kernel_counter: int, cpa: int) -> VerifyOrWriteContext:
        return VerifyOrWriteContext(
            canary_buf=self.canary_buf().to(device),
            kernel_kind=self.kind,
            violation_ring=self.ring.clone().to(device),
            violation_write_index=torch.tensor([self.write_index], dtype=torch.int32, device=device),
            slot_run_counter=torch.tensor([slot_counter], dtype=torch.int64, device=device),
            kernel_run_counter=torch.tensor([kernel_counter], dtype=torch.int64, device=device),
            real_kv_sources=tuple(s.build(device) for s in self.sources),
            real_kv_hash_mode=self.mode,
            enable_chain_position_assert=torch.tensor([cpa], dtype=torch.int32, device=device),
        )


def _sources(rng: random.Random, num_slots: int, hostile: bool, max_sources: int = 4) -> list[SourceSpec]:
    out = []
    for _ in range(rng.randint(0, max_sources)):
        page = rng.choice([1, 1, 2, 4])
        nbpt = rng.choice([16, 32, 64, 128])
        read = rng.randrange(16, nbpt + 1, 16)
        rows = -(-num_slots // page)
        if hostile and rng.random() < 0.3:
            rows = max(1, rows - rng.randint(1, 3))
        row_bytes = page * nbpt + 16 * rng.randint(0, 2)
        data = torch.randint(0, 256, (rows, row_bytes), dtype=torch.uint8, generator=_gen(rng))
        view = rng.choice([torch.uint8, torch.uint8, torch.float16, torch.int32])
        out.append(SourceSpec(data, page, nbpt, read, view))
    return out


def _gen(rng: random.Random) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(rng.getrandbits(62))
    return g


def make_world(rng: random.Random, *, hostile: bool = False, num_slots: int | None = None) -> World:
    n = num_slots or rng.randint(8, 160)
    stride = rng.choice([32, 32, 40, 64])
    g = _gen(rng)
    recs = torch.randint(-(2**62), 2**62, (n, 4), dtype=torch.int64, generator=g)
    if rng.random() < 0.5:
        recs[rng.randrange(n)] = 0  # a never-written slot
    pad = torch.randint(0, 256, (n, stride - 32), dtype=torch.uint8, generator=g)
    cap = rng.choice([1, 2, 4, 16, 64, 1024])
    wi = rng.choice([0, 0, 0, rng.randint(0, cap), cap + rng.randint(0, 3)])
    ring = torch.randint(-100, 100, (cap, 8), dtype=torch.int64, generator=g)
    ring[min(wi, cap):] = 0
    return World(n, stride, recs, pad, _sources(rng, n, hostile), rng.choice(list(RealKvHashMode)), ring, wi,
                 rng.choice(list(CanaryLaunchTag)))


def _chain(world: World, rng: random.Random, slots: list[int], start_pos: int, seed_hash: int) -> list[int]:
    """Stamp a consistent chain into ``world.records``; return the tokens written."""
    running = seed_hash
    tokens = []
    for k, s in enumerate(slots):
        tok = rng.randint(0, 50000)
        pos = start_pos + k
        world.records[s] = torch.tensor([tok, pos, to_int64(running), world.real_kv(s)], dtype=torch.int64)
        running = record_hash(running, tok, pos)
        tokens.append(tok)
    return tokens


def _record_hash_of(world: World, slot: int) -> int:
    r = world.records[slot].tolist()
    return record_hash(r[2], r[0], r[1])


# -- verify ---------------------------------------------------------------------------------------------
def verify_call(rng: random.Random, *, hostile: bool = False) -> Call:
    world = make_world(rng, hostile=hostile)
    n = world.num_slots
    free = list(range(1, n))
    rng.shuffle(free)
    entries: list[tuple[int, int, int, int]] = []  # slot, prev, pos, exp_tok
    while len(free) > 2 and rng.random() < 0.85:
        length = rng.randint(1, min(12, len(free)))
        chain, free = free[:length], free[length:]
        tokens = _chain(world, rng, chain, 0, ANCHOR_HASH)
        for k, s in enumerate(chain):
            if rng.random() < 0.8:
                prev = chain[k - 1] if k else -1
                if rng.random() < 0.05:
                    prev = 0
                tok = tokens[k] if rng.random() < 0.9 else -1
                entries.append((s, prev, k, tok))
    # corruptions
    for _ in range(rng.randint(0, 4)):
        s = rng.randrange(1, n)
        world.records[s, rng.randrange(4)] ^= 1 << rng.randrange(63)
    for src in world.sources:
        if rng.random() < 0.3:
            src.data[rng.randrange(src.data.shape[0]), rng.randrange(src.data.shape[1])] ^= 0x5A
    if rng.random() < 0.1:
        entries.append((0, -1, 0, -1))
    if entries and rng.random() < 0.2:
        i = rng.randrange(len(entries))
        s, p, pos, t = entries[i]
        entries[i] = (s, p, pos + 1, t + 1 if t >= 0 else t)
    if hostile:
        for _ in range(rng.randint(1, 4)):
            choice = rng.random()
            s = rng.choice([n, n + rng.randint(0, 1000), -rng.randint(1, 5), INVALID_SLOT, 2**40])
            if choice < 0.5:
                entries.append((s, rng.randrange(1, n), rng.randint(0, 9), -1))
            else:
                entries.append((rng.randrange(1, n), rng.choice([n, INVALID_SLOT, n + 7]), rng.randint(0, 9), -1))
    rng.shuffle(entries)
    count = len(entries)
    cap = max(1, count + rng.choice([0, 0, 1, 5]))
    num_valid = rng.choice([count, count, max(0, count - 2), cap + 3, -1 if hostile else count])
    enable = rng.choice([1, 1, 1, 1, 0, 2])
    check = rng.random() < 0.6
    garbage = torch.randint(1, n, (cap, 4), dtype=torch.int64, generator=_gen(rng))
    slot_counter, kernel_counter = rng.randint(0, 99), rng.randint(0, 99)
    cpa = rng.randint(0, 1)
    base = world.write_index

    def make(device: Device) -> dict[str, Any]:
        arr = garbage.clone()
        if entries:
            arr[:count] = torch.tensor(entries, dtype=torch.int64)
        plan = VerifyPlan(
            verify_slot_indices=arr[:, 0].contiguous().to(device),
            verify_expected_tokens=arr[:, 3].contiguous().to(device),
            verify_expected_positions=arr[:, 2].contiguous().to(device),
            verify_prev_slot_indices=arr[:, 1].contiguous().to(device),
            verify_num_valid=torch.tensor([num_valid], dtype=torch.int32, device=device),
            enable=torch.tensor([enable], dtype=torch.int32, device=device),
        )
        ctx = world.context(device, slot_counter=slot_counter, kernel_counter=kernel_counter, cpa=cpa)
        return {"context": ctx, "plan": plan, "check_verify_expected_token": check}

    overflow = base < world.ring.shape[0] < base + count
    return Call(Op.VERIFY, make, _context_outputs, base, order_sensitive=overflow, label="verify")


def _context_outputs(kw: dict[str, Any]) -> dict[str, torch.Tensor]:
    ctx: VerifyOrWriteContext = kw["context"]
    return {"canary_buf": ctx.canary_buf, "violation_ring": ctx.violation_ring,
            "violation_write_index": ctx.violation_write_index, "slot_run_counter": ctx.slot_run_counter,
            "kernel_run_counter": ctx.kernel_run_counter}


# -- write ----------------------------------------------------------------------------------------------
def write_call(rng: random.Random, *, hostile: bool = False, max_tokens: int | None = None) -> Call:
    if max_tokens is None:  # mostly short requests, sometimes long ones (several 32-token tiles)
        max_tokens = rng.choice([24, 24, 24, 80, 160])
    world = make_world(rng, hostile=hostile, num_slots=rng.randint(8, 160) if max_tokens <= 24 else 400)
    n = world.num_slots
    free = list(range(1, n))
    rng.shuffle(free)
    nreq = rng.randint(1, 6)
    ids: list[int] = []
    poss: list[int] = []
    locs: list[int] = []
    exp_t: list[int] = []
    exp_p: list[int] = []
    seeds: list[int] = []
    offsets = [0]
    for _ in range(nreq):
        kind = rng.random()
        start_pos = 0
        seed = -1
        if kind < 0.6 and len(free) > 3:
            hist = rng.randint(1, 3)
            chain, free = free[:hist], free[hist:]
            start_pos = rng.randint(0, 5)
            _chain(world, rng, chain, start_pos, ANCHOR_HASH)
            seed = chain[-1]
            start_pos += hist
        elif kind < 0.7:
            seed = rng.choice([-1, -rng.randint(2, 9)])
        count = rng.randint(0, min(max_tokens, max(0, len(free) - 1)))
        for k in range(count):
            tok = rng.randint(0, 50000)
            pos = start_pos + k + (1 if rng.random() < 0.05 else 0)
            loc = free.pop() if rng.random() < 0.9 else -1
            if hostile and rng.random() < 0.1:
                loc = rng.choice([n, n + rng.randint(1, 100)])
            ids.append(tok)
            poss.append(pos)
            locs.append(loc)
            exp_t.append(tok if rng.random() < 0.9 else tok + 1)
            exp_p.append(pos if rng.random() < 0.9 else pos + 2)
        if rng.random() < 0.1 and locs and 0 not in locs:
            locs[-1] = 0  # padding tokens may land in slot 0 (once: two writers of one slot race)
        if hostile and rng.random() < 0.2:
            seed = rng.choice([INVALID_SLOT, n + 3])
        seeds.append(seed)
        offsets.append(len(ids))
    cap = nreq + rng.choice([0, 0, 2])
    pad = rng.randint(0, 3)
    ntok = len(ids) + pad
    g = _gen(rng)
    tail = torch.randint(-5, 50, (pad,), dtype=torch.int64, generator=g)
    num_valid = rng.choice([nreq, nreq, max(0, nreq - 1), cap + 2])
    assert_on = rng.random() < 0.4
    cpa = rng.choice([0, 1, 1])
    if hostile and rng.random() < 0.3:
        offsets[-1] += rng.randint(1, 5)  # runs past the token arrays
    slot_counter, kernel_counter = rng.randint(0, 99), rng.randint(0, 99)
    base = world.write_index
    # rows past nreq are padding: empty ranges (their writes would race with the real rows' in parallel backends)
    offs = offsets + [offsets[-1]] * (cap - nreq)
    seeds_full = seeds + [rng.randint(-3, n - 1) for _ in range(cap - nreq)]

    def make(device: Device) -> dict[str, Any]:
        def t(xs: list[int]) -> torch.Tensor:
            return torch.cat([torch.tensor(xs, dtype=torch.int64), tail]).to(device)

        plan = WritePlan(
            write_offsets=torch.tensor(offs, dtype=torch.int64, device=device),
            write_seed_slot_indices=torch.tensor(seeds_full, dtype=torch.int64, device=device),
            write_num_valid_reqs=torch.tensor([num_valid], dtype=torch.int32, device=device),
        )
        ctx = world.context(device, slot_counter=slot_counter, kernel_counter=kernel_counter, cpa=cpa)
        return {
            "context": ctx, "plan": plan, "input_ids": t(ids), "positions": t(poss), "out_cache_loc": t(locs),
            "enable_write_input_assert": assert_on,
            "expected_input_tokens": t(exp_t) if assert_on else None,
            "expected_input_positions": t(exp_p) if assert_on else None,
        }

    assert ntok == len(ids) + pad
    rows_max = 3 * len(ids) + nreq
    overflow = base < world.ring.shape[0] < base + rows_max
    return Call(Op.WRITE, make, _context_outputs, base, order_sensitive=overflow, label="write")


# -- plan -----------------------------------------------------------------------------------------------
def plan_call(rng: random.Random, *, hostile: bool = False) -> Call:
    bs = rng.randint(0, 40)
    max_reqs = bs + rng.randint(1, 8)
    max_seq = rng.randint(1, 48)
    full_slots = rng.randint(8, 600)
    g = _gen(rng)
    r2t = torch.randint(0, full_slots, (max_reqs, max_seq), dtype=torch.int32, generator=g)
    rpi = [rng.choice([0, *list(range(1, max_reqs))]) if rng.random() < 0.15 else rng.randrange(1, max_reqs)
           for _ in range(bs)]
    prefix = [rng.randint(0, max_seq) for _ in range(bs)]
    extend = [rng.choice([0, 1, 1, rng.randint(1, 20), -1]) for _ in range(bs)]
    if hostile:
        for i in range(bs):
            if rng.random() < 0.1:
                rpi[i] = rng.choice([max_reqs, max_reqs + 5, -2])
            if rng.random() < 0.1:
                prefix[i] = max_seq + rng.randint(1, 5)
    swa = rng.choice([0, 0, rng.randint(1, 12)])
    lut = None
    if swa or rng.random() < 0.1:
        lut_len = full_slots + 1 if not hostile else rng.randint(1, full_slots)
        lut = torch.randint(0, 500, (lut_len,), dtype=torch.int64, generator=g)
        if not swa:
            swa = 0
    offset = rng.choice([0, 0, 1])
    pool = valid = None
    if rng.random() < 0.5:
        cols = rng.randint(1, max_seq + 3)
        pool = torch.randint(-5, 1000, (max_reqs + (0 if not hostile else -1 if max_reqs > 1 else 0), cols),
                             dtype=torch.int32, generator=g)
        valid = torch.tensor([rng.randint(0, cols + (3 if hostile else 0)) for _ in range(bs)], dtype=torch.int64)
    ws = [max(0, p - swa) if swa else 0 for p in prefix]
    total = sum(max(0, p - w) for p, w, r in zip(prefix, ws, rpi, strict=True) if r != 0)
    cap = max(1, total + rng.choice([0, 3, -1 if total > 1 else 0, 10]))
    wcap = bs + rng.randint(0, 3) or 1
    g2 = _gen(rng)
    init_v = torch.randint(-9, 99, (cap, 4), dtype=torch.int64, generator=g2)
    init_w = torch.randint(-9, 99, (2 * wcap + 1,), dtype=torch.int64, generator=g2)
    with_scratch = rng.random() < 0.5

    def make(device: Device) -> dict[str, Any]:
        vp = VerifyPlan(
            verify_slot_indices=init_v[:, 0].contiguous().to(device),
            verify_expected_tokens=init_v[:, 1].contiguous().to(device),
            verify_expected_positions=init_v[:, 2].contiguous().to(device),
            verify_prev_slot_indices=init_v[:, 3].contiguous().to(device),
            verify_num_valid=torch.tensor([77], dtype=torch.int32, device=device),
            enable=torch.tensor([5], dtype=torch.int32, device=device),
            verify_offsets_scratch=(torch.full((4097,), 3, dtype=torch.int64, device=device) if with_scratch else None),
        )
        wp = WritePlan(
            write_offsets=init_w[: wcap + 1].clone().to(device),
            write_seed_slot_indices=init_w[wcap + 1 :].clone().to(device),
            write_num_valid_reqs=torch.tensor([99], dtype=torch.int32, device=device),
        )
        return {
            "verify_plan_out": vp, "write_plan_out": wp,
            "req_pool_indices": torch.tensor(rpi, dtype=torch.int64, device=device),
            "prefix_lens": torch.tensor(prefix, dtype=torch.int64, device=device),
            "extend_seq_lens": torch.tensor(extend, dtype=torch.int64, device=device),
            "req_to_token": r2t.to(device), "swa_window_size": swa,
            "full_to_swa_index_mapping": None if lut is None else lut.to(device),
            "verify_capacity": cap,
            "req_to_verify_expected_tokens": None if pool is None else pool.to(device),
            "req_to_verify_expected_tokens_valid_lens": None if valid is None else valid.to(device),
            "kv_token_id_vs_position_offset": offset,
        }

    def outputs(kw: dict[str, Any]) -> dict[str, torch.Tensor]:
        vp: VerifyPlan = kw["verify_plan_out"]
        wp: WritePlan = kw["write_plan_out"]
        out = {f"verify_plan_out.{k}": getattr(vp, k) for k in
               ("verify_slot_indices", "verify_expected_tokens", "verify_expected_positions",
                "verify_prev_slot_indices", "verify_num_valid", "enable")}
        out.update({f"write_plan_out.{k}": getattr(wp, k) for k in
                    ("write_offsets", "write_seed_slot_indices", "write_num_valid_reqs")})
        return out

    return Call(Op.PLAN, make, outputs, label="plan")


# -- scatter --------------------------------------------------------------------------------------------
def scatter_call(rng: random.Random, *, hostile: bool = False) -> Call:
    bs = rng.randint(0, 12)
    rows = rng.randint(1, 20)
    cols = rng.randint(1, 48)
    lens = [rng.choice([0, rng.randint(1, 2 * cols)]) for _ in range(bs)]
    offsets = [0]
    for ln in lens:
        offsets.append(offsets[-1] + ln)
    rpi = [rng.randrange(rows) for _ in range(bs)]
    ntok = offsets[-1]
    if hostile:
        for i in range(bs):
            if rng.random() < 0.15:
                rpi[i] = rng.choice([rows, rows + 3, -1])
        if bs and rng.random() < 0.3:
            offsets[-1] += rng.randint(1, 9)
    g = _gen(rng)
    flat = torch.randint(-(2**40), 2**40, (ntok,), dtype=torch.int64, generator=g)
    pool = torch.randint(-50, 50, (rows, cols), dtype=torch.int32, generator=g)

    def make(device: Device) -> dict[str, Any]:
        return {"flat_in": flat.to(device), "offsets": torch.tensor(offsets, dtype=torch.int64, device=device),
                "req_pool_indices": torch.tensor(rpi, dtype=torch.int64, device=device),
                "pool_out": pool.clone().to(device)}

    return Call(Op.SCATTER, make, lambda kw: {"pool_out": kw["pool_out"]}, label="scatter")


GENERATORS: dict[Op, Callable[..., Call]] = {
    Op.VERIFY: verify_call,
    Op.WRITE: write_call,
    Op.PLAN: plan_call,
    Op.SCATTER: scatter_call,
}

"""Random parity scenarios: small worlds built like an engine builds them, and large seeded calls.

:data:`GENERATORS` holds one random generator per operation (small, realistic or ``hostile``), each
registered beside its definition with ``@scenario(Op.X)``; the larger
seeded calls (:func:`large_verify_call`, :func:`large_write_call`, :func:`large_plan_call`,
:func:`large_scatter_call`) run many grid-stride rounds, long requests, long plan rows. Each returns a
:class:`~kvcanary.testing.builders.Call`. Worlds are chains of slots written with the real hash, shared
prefixes, padding rows, a partly filled ring; then some fraction is corrupted (fields, KV bytes) and, when
``hostile`` is set, indices point outside their tensors. :func:`fuzz` and :func:`opcheck_random` check fresh
scenarios against torch_ref and ``torch.library.opcheck``.

Development tooling (kvcanary's tests and benchmarks): not part of the installed package.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch

from kvcanary.consts import (
    CANARY_SLOT_BYTES,
    INVALID_SLOT,
    PLAN_OFFSETS_SCRATCH_LEN,
    CanaryLaunchTag,
    RealKvHashMode,
)
from kvcanary.context import VerifyOrWriteContext
from kvcanary.hashing import ANCHOR_HASH, real_kv_hash, record_hash, to_int64
from kvcanary.launch.plan_offsets import launch_plan_offsets_kernel
from kvcanary.launch.write import launch_canary_write_kernel
from kvcanary.plans import VerifyPlan
from kvcanary.registry import Op
from kvcanary.sources import RealKvSource
from kvcanary.testing.builders import (
    Call,
    Device,
    Kwargs,
    Outputs,
    context,
    context_outputs,
    int64_tensor,
    offsets_of,
    one_element,
    plan_entries_kwargs,
    plan_kwargs,
    plan_offsets_kwargs,
    plan_outputs,
    verify_plan,
    write_kwargs,
    write_plan,
)
from kvcanary.testing.opcheck import opcheck
from kvcanary.testing.parity import check_call


def _rows_plan(rows: torch.Tensor, device: Device, *, num_valid: int, enable: int = 1) -> VerifyPlan:
    """A plan from CPU rows ``[capacity, 4]`` of (slot, predecessor, position, token)."""
    slots, prevs, pos, toks = (rows[:, k].contiguous().to(device, copy=True) for k in range(4))
    return verify_plan(slots, prevs, pos, toks, num_valid=num_valid, enable=enable)


_OFFSETS_OUT = ("out_verify_offsets_scratch", "out_write_offsets", "out_write_seed_slot_indices",
                "out_verify_num_valid", "out_verify_enable", "out_write_num_valid_reqs")
_ENTRIES_OUT = ("out_verify_slot_indices", "out_verify_expected_tokens", "out_verify_expected_positions",
                "out_verify_prev_slot_indices")


def _named(names: Sequence[str]) -> Callable[[Kwargs], Outputs]:
    return lambda kw: {k: kw[k] for k in names}


def _moved(sources: Sequence[RealKvSource], device: Device) -> tuple[RealKvSource, ...]:
    return tuple(RealKvSource(tensor=s.tensor.to(device), page_size=s.page_size,
                              num_bytes_per_token=s.num_bytes_per_token, read_bytes=s.read_bytes) for s in sources)


def _gen(rng: random.Random) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(rng.getrandbits(62))
    return g


def _rng(seed: random.Random | int) -> random.Random:
    return seed if isinstance(seed, random.Random) else random.Random(seed)


# -- small random worlds ----------------------------------------------------------------------------------
@dataclass
class SourceSpec:
    """A small world's real-KV source: CPU bytes, built on a device as a view of another dtype."""

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
    """A small random world on the CPU: records, padding bytes past them, sources, a partly filled ring."""

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
        return context(canary_buf=self.canary_buf().to(device), sources=[s.build(device) for s in self.sources],
                       mode=self.mode, ring=self.ring.clone(), write_index=self.write_index,
                       slot_counter=slot_counter, kernel_counter=kernel_counter, chain_assert=bool(cpa),
                       kind=self.kind)


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


def make_world(rng: random.Random, *, hostile: bool = False, num_slots: int | None = None) -> World:
    """Random records (a never-written slot at times), 32- to 64-byte slot strides, up to four sources (short
    ones when ``hostile``), a ring of 1 to 1024 rows already filled up to its write index or past it."""
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


Generator = Callable[..., Call]
G = TypeVar("G", bound=Generator)

GENERATORS: dict[Op, Generator] = {}
"""One random scenario generator per operation: ``GENERATORS[op](rng, hostile=...) -> Call`` (see
:func:`scenario`)."""
ELSEWHERE: dict[Op, str] = {Op.FOLD: "tests/distributed/test_digest.py",
                            Op.VERIFY_BUDGET: "tests/backends/triton/test_budget.py"}
"""The operations whose random parity scenarios live elsewhere, and where (a test holds every operation to
one of the two)."""


def scenario(op: Op) -> Callable[[G], G]:
    """Register the decorated function as ``op``'s random scenario generator (one per operation)."""

    def register(fn: G) -> G:
        if op in GENERATORS or op in ELSEWHERE:
            raise ValueError(f"{op} already has its random scenarios ({GENERATORS.get(op) or ELSEWHERE[op]})")
        GENERATORS[op] = fn
        return fn

    return register


# -- random scenarios: verify ------------------------------------------------------------------------------
@scenario(Op.VERIFY)
def verify_call(rng: random.Random, *, hostile: bool = False) -> Call:
    """Chains of up to 12 slots verified in part, shuffled, with corrupted fields and KV bytes, a slot-0 entry,
    a position off by one; ``hostile``: slots and predecessors outside the buffer, a negative count."""
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
    rows = garbage.clone()
    if entries:
        rows[:count] = torch.tensor(entries, dtype=torch.int64)

    def make(device: Device) -> Kwargs:
        ctx = world.context(device, slot_counter=slot_counter, kernel_counter=kernel_counter, cpa=cpa)
        return {"context": ctx, "plan": _rows_plan(rows, device, num_valid=num_valid, enable=enable),
                "check_verify_expected_token": check}

    overflow = base < world.ring.shape[0] < base + min(max(num_valid, 0), cap)
    return Call(Op.VERIFY, make, context_outputs, base, order_sensitive=overflow, label="verify")


# -- random scenarios: write -------------------------------------------------------------------------------
@scenario(Op.WRITE)
def write_call(rng: random.Random, *, hostile: bool = False, max_tokens: int | None = None) -> Call:
    """Up to 6 requests of up to ``max_tokens`` tokens, continuing stamped chains or starting new ones, skipped
    tokens, padding rows and tail; ``hostile``: slots and seeds outside the buffer, offsets past the tokens."""
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
    tail = torch.randint(-5, 50, (pad,), dtype=torch.int64, generator=_gen(rng))
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

    def make(device: Device) -> Kwargs:
        def t(xs: list[int]) -> torch.Tensor:
            return torch.cat([torch.tensor(xs, dtype=torch.int64), tail]).to(device)

        ctx = world.context(device, slot_counter=slot_counter, kernel_counter=kernel_counter, cpa=cpa)
        return write_kwargs(ctx, write_plan(offs, seeds_full, num_valid=num_valid, device=device), t(ids), t(poss),
                            t(locs), expected_tokens=t(exp_t) if assert_on else None,
                            expected_positions=t(exp_p) if assert_on else None)

    rows_max = 3 * len(ids) + nreq
    overflow = base < world.ring.shape[0] < base + rows_max
    return Call(Op.WRITE, make, context_outputs, base, order_sensitive=overflow, label="write")


# -- random scenarios: plan and its two stages --------------------------------------------------------------
@scenario(Op.PLAN)
def plan_call(rng: random.Random, *, hostile: bool = False) -> Call:
    """Up to 40 rows (padding ones too), an SWA window with its LUT at times, a token pool; outputs start as
    garbage; ``hostile``: rows and prefixes past req_to_token, a short LUT and pool."""
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

    def make(device: Device) -> Kwargs:
        vp = VerifyPlan(
            verify_slot_indices=init_v[:, 0].contiguous().to(device),
            verify_expected_tokens=init_v[:, 1].contiguous().to(device),
            verify_expected_positions=init_v[:, 2].contiguous().to(device),
            verify_prev_slot_indices=init_v[:, 3].contiguous().to(device),
            verify_num_valid=one_element(77, torch.int32, device),
                        enable=one_element(5, torch.int32, device),
            verify_offsets_scratch=(torch.full((PLAN_OFFSETS_SCRATCH_LEN,), 3, dtype=torch.int64, device=device)
                                    if with_scratch else None))
        wp = write_plan(init_w[: wcap + 1], init_w[wcap + 1 :], num_valid=99, device=device)
        return plan_kwargs(vp, wp, int64_tensor(rpi, device), int64_tensor(prefix, device),
                           int64_tensor(extend, device), r2t.to(device),
                           window=swa, lut=None if lut is None else lut.to(device), capacity=cap,
                           pool=None if pool is None else pool.to(device),
                           valid=None if valid is None else valid.to(device), token_offset=offset)

    return Call(Op.PLAN, make, lambda kw: plan_outputs(kw, scratch=False), label="plan")


@scenario(Op.PLAN_OFFSETS)
def plan_offsets_call(rng: random.Random, *, hostile: bool = False) -> Call:
    """Stage 1 alone, on a fused-plan scenario; its outputs start as that scenario's garbage, the scratch
    (sometimes longer than needed) as one random value."""
    base = plan_call(rng, hostile=hostile)
    extra = rng.choice([0, 0, 5])
    fill = rng.randint(-9, 99)

    def make(device: Device) -> Kwargs:
        scratch = torch.full((PLAN_OFFSETS_SCRATCH_LEN + extra,), fill, dtype=torch.int64, device=device)
        return plan_offsets_kwargs(base.make(device), scratch)

    return Call(Op.PLAN_OFFSETS, make, _named(_OFFSETS_OUT), label="plan_offsets")


@scenario(Op.PLAN_ENTRIES)
def plan_entries_call(rng: random.Random, *, hostile: bool = False) -> Call:
    """Stage 2 alone, from the reference's own stage-1 offsets, or (hostile, half the time) from arbitrary
    offsets, sorted or not."""
    base = plan_call(rng, hostile=hostile)
    garbage = hostile and rng.random() < 0.5
    ordered = rng.random() < 0.5
    enable = rng.choice([1, 1, 1, 0, 2])
    seed = rng.getrandbits(32)

    def make(device: Device) -> Kwargs:
        kw = base.make("cpu")
        bs = int(kw["req_pool_indices"].shape[0])
        gen = torch.Generator().manual_seed(seed)
        scratch = torch.randint(-9, 99, (PLAN_OFFSETS_SCRATCH_LEN,), dtype=torch.int64, generator=gen)
        if garbage:
            head = torch.randint(-4, kw["verify_capacity"] + 6, (bs + 1,), generator=gen)
            scratch[: bs + 1] = head.sort().values if ordered else head
        else:  # the reference's stage 1 fills the scratch (its plan outputs are a throwaway copy)
            launch_plan_offsets_kernel(**plan_offsets_kwargs(kw, scratch), backend="torch_ref")
        return plan_entries_kwargs(base.make(device), scratch.to(device), one_element(enable, torch.int32, device))

    return Call(Op.PLAN_ENTRIES, make, _named(_ENTRIES_OUT), label="plan_entries")


# -- random scenarios: scatter -----------------------------------------------------------------------------
@scenario(Op.SCATTER)
def scatter_call(rng: random.Random, *, hostile: bool = False) -> Call:
    """Up to 12 requests into a pool of up to 20 rows; ``hostile``: rows past the pool, offsets past flat_in."""
    bs = rng.randint(0, 12)
    rows = rng.randint(1, 20)
    cols = rng.randint(1, 48)
    lens = [rng.choice([0, rng.randint(1, 2 * cols)]) for _ in range(bs)]
    offsets = offsets_of(lens)
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
    return _scatter(flat, offsets, rpi, pool, "scatter")


def _scatter(flat: torch.Tensor, offsets: Sequence[int], rpi: Sequence[int], pool: torch.Tensor, label: str) -> Call:
    def make(device: Device) -> Kwargs:
        return {"flat_in": flat.to(device), "offsets": int64_tensor(offsets, device),
                "req_pool_indices": int64_tensor(rpi, device), "pool_out": pool.clone().to(device)}

    return Call(Op.SCATTER, make, _named(("pool_out",)), label=label)


# -- larger seeded calls (several grid-stride rounds, several write tiles, long plan rows) --------------------
def kv_sources(rng: random.Random, num_slots: int, count: int, *, short_rows: int = 0) -> list[RealKvSource]:
    """``count`` real-KV sources of random bytes on the CPU: pages of 1 to 4 slots, strips of 16 to 128 bytes
    read in part or whole, rows sometimes padded; the first source ``short_rows`` rows short of the buffer."""
    out = []
    for i in range(count):
        page = rng.choice([1, 1, 2, 4])
        nbpt = rng.choice([16, 32, 48, 64, 128])
        read = rng.randrange(16, nbpt + 1, 16)
        rows = max(1, -(-num_slots // page) - (short_rows if i == 0 else 0))
        data = torch.randint(0, 256, (rows, page * nbpt + 16 * rng.randint(0, 1)), dtype=torch.uint8,
                             generator=_gen(rng))
        out.append(RealKvSource(tensor=data, page_size=page, num_bytes_per_token=nbpt, read_bytes=read))
    return out


def _random_records(rng: random.Random, num_slots: int) -> torch.Tensor:
    """A CPU canary buffer of random records (what slots nobody stamped hold)."""
    return torch.randint(0, 256, (num_slots, CANARY_SLOT_BYTES), dtype=torch.uint8, generator=_gen(rng))


def _stamp(buf: torch.Tensor, sources: Sequence[RealKvSource], mode: RealKvHashMode, lengths: Sequence[int],
           locs: torch.Tensor, tokens: torch.Tensor) -> None:
    """Write consistent chains (one per request of ``lengths``, positions from 0) into the CPU ``buf``,
    through torch_ref's write launcher."""
    ctx = context(canary_buf=buf, sources=sources, mode=mode, ring=16)
    offs = offsets_of(lengths)
    positions = torch.cat([torch.arange(n) for n in lengths]) if lengths else torch.zeros(0, dtype=torch.int64)
    launch_canary_write_kernel(**write_kwargs(ctx, write_plan(offs, [-1] * len(lengths)), tokens, positions, locs),
                               backend="torch_ref")


def large_verify_call(seed: random.Random | int, *, chains: int, length: int, sources: int = 0,
                      mode: RealKvHashMode | int = RealKvHashMode.NONE, check: bool = True, corruptions: int = 20,
                      short_sources: bool = False, num_slots: int | None = None, ring: int = 4096) -> Call:
    """``chains`` chains of ``length`` entries over random distinct slots, stamped consistently (torch_ref's
    write) among random records, then ``corruptions`` flipped record bits and KV bytes; every chain entry is
    verified, shuffled, with five hostile entries (slot 0, a negative slot, a slot past the buffer, a
    predecessor past it and an INVALID one) and capacity slack past ``num_valid``."""
    rng = _rng(seed)
    mode = RealKvHashMode(mode)
    n = chains * length
    num_slots = num_slots or n + 1 + rng.randint(0, 50)
    gen = _gen(rng)
    chain_slots = (torch.randperm(num_slots - 1, generator=gen)[:n] + 1).view(chains, length)
    tokens = torch.randint(0, 50000, (chains, length), dtype=torch.int64, generator=gen)
    srcs = kv_sources(rng, num_slots, sources, short_rows=3 if short_sources else 0)
    buf = _random_records(rng, num_slots)
    _stamp(buf, srcs, mode, [length] * chains, chain_slots.reshape(-1), tokens.reshape(-1))
    for _ in range(corruptions):
        buf[rng.randrange(1, num_slots), rng.randrange(CANARY_SLOT_BYTES)] ^= 1 << rng.randrange(8)
    for s in srcs:
        for _ in range(corruptions):
            s.tensor[rng.randrange(s.tensor.shape[0]), rng.randrange(s.tensor.shape[1])] ^= 0x11
    prev = torch.cat([torch.full((chains, 1), -1, dtype=torch.int64), chain_slots[:, :-1]], dim=1)
    pos = torch.arange(length).expand(chains, length)
    rows = torch.stack([chain_slots, prev, pos, tokens], dim=-1).reshape(-1, 4)
    rows = rows[torch.randperm(n, generator=gen)]
    first = int(chain_slots[0, 0]) if n else 1
    extra = torch.tensor([[num_slots + 5, 3, 0, -1], [-1, 2, 0, -1], [3, num_slots, 1, -1], [0, -1, 0, -1],
                          [first, INVALID_SLOT, 1, -1]])
    rows = torch.cat([rows, extra, torch.ones(7, 4, dtype=torch.int64)])
    count = n + extra.shape[0]

    def make(device: Device) -> Kwargs:
        ctx = context(canary_buf=buf.to(device, copy=True), sources=_moved(srcs, device), mode=mode, ring=ring)
        return {"context": ctx, "plan": _rows_plan(rows, device, num_valid=count),
                "check_verify_expected_token": check}

    return Call(Op.VERIFY, make, context_outputs, 0, label=f"verify {chains}x{length} {mode.name}")


def large_write_call(seed: random.Random | int, *, requests: int, length: int, vary: bool = False,
                     sources: int = 0, mode: RealKvHashMode | int = RealKvHashMode.NONE, assert_inputs: bool = False,
                     hostile: bool = False, short_sources: bool = False, num_slots: int | None = None,
                     ring: int = 1 << 14) -> Call:
    """``requests`` requests of ``length`` tokens (``vary``: 0, 1, up to or exactly ``length``) at distinct
    free slots, about half continuing a chain stamped in two other slots (the rest chain heads), a few tokens
    skipped (slot -1), a padded tail past the last request. ``hostile`` adds seeds and slots past the buffer and
    a few position jumps; ``assert_inputs`` checks the inputs against expected tensors with a few mismatches."""
    rng = _rng(seed)
    mode = RealKvHashMode(mode)
    lens = [rng.choice([0, 1, rng.randint(1, length), length]) if vary else length for _ in range(requests)]
    total = sum(lens)
    num_slots = num_slots or total + 2 * requests + 8
    perm = (torch.randperm(num_slots - 1, generator=_gen(rng)) + 1).tolist()
    srcs = kv_sources(rng, num_slots, sources, short_rows=2 if short_sources else 0)
    heads = torch.tensor(perm[: 2 * requests], dtype=torch.int64)
    buf = _random_records(rng, num_slots)
    _stamp(buf, srcs, mode, [2] * requests, heads, torch.randint(0, 50000, (2 * requests,), generator=_gen(rng)))
    free = perm[2 * requests :]
    ids: list[int] = []
    poss: list[int] = []
    locs: list[int] = []
    seeds: list[int] = []
    for r, ln in enumerate(lens):
        kind = rng.random()
        cont = kind < (0.7 if hostile else 0.5)
        seeds.append(int(heads[2 * r + 1]) if cont else (num_slots + 3 if hostile and kind > 0.9 else -1))
        for j in range(ln):
            ids.append(rng.randint(0, 50000))
            poss.append((2 if cont else 0) + j + (1 if hostile and rng.random() < 0.01 else 0))
            x = rng.random()
            locs.append(free.pop() if x < 0.95 else -1 if not hostile or x < 0.98 else num_slots + rng.randint(0, 9))
    exp_t = [t if rng.random() < 0.98 else t + 1 for t in ids]
    exp_p = [p if rng.random() < 0.98 else p + 1 for p in poss]
    offs = offsets_of(lens)

    def make(device: Device) -> Kwargs:
        def t(xs: list[int]) -> torch.Tensor:
            return int64_tensor([*xs, 7, 7], device)  # a padded tail

        ctx = context(canary_buf=buf.to(device, copy=True), sources=_moved(srcs, device), mode=mode, ring=ring)
        return write_kwargs(ctx, write_plan(offs, seeds, device=device), t(ids), t(poss), t(locs),
                            expected_tokens=t(exp_t) if assert_inputs else None,
                            expected_positions=t(exp_p) if assert_inputs else None)

    return Call(Op.WRITE, make, context_outputs, 0, label=f"write {requests}x{length} {mode.name}")


def large_plan_call(seed: random.Random | int, *, bs: int, max_prefix: int, cols: int | None = None, window: int = 0,
                    lut: bool = False, pool: bool = False, stray_rows: bool = False,
                    prefixes: Sequence[int] | None = None, slack: int | None = None,
                    num_slots: int | None = None) -> Call:
    """A fused plan over ``bs`` random rows of up to ``max_prefix`` cached tokens (0, 1, any, or exactly
    ``max_prefix``; some rows padding). ``cols`` below ``max_prefix`` puts the ends of long rows past
    req_to_token (and the pool); ``stray_rows`` points a few requests past both tensors' rows; ``window`` > 0
    plans an SWA window through a LUT shorter than the slots (``lut`` adds the LUT without a window);
    ``prefixes`` fixes the rows' lengths (then no row is padding); ``slack`` entries of capacity past the total
    (random 0 or 5 otherwise) must stay untouched. Every output starts as distinct garbage and is compared."""
    rng = _rng(seed)
    gen = _gen(rng)
    max_reqs = bs + 3
    cols = max_prefix + 4 if cols is None else cols
    full_slots = num_slots or bs * max_prefix + 10
    r2t = torch.randint(0, full_slots, (max_reqs, cols), dtype=torch.int32, generator=gen)
    rpi = [rng.randrange(1, max_reqs) if rng.random() < 0.95 else 0 for _ in range(bs)]
    if stray_rows:
        rpi = [r if rng.random() < 0.8 else rng.choice([max_reqs, max_reqs + 7, -3]) for r in rpi]
    prefix = [rng.choice([0, 1, rng.randint(0, max_prefix), max_prefix]) for _ in range(bs)]
    if prefixes is not None:
        if len(prefixes) != bs or stray_rows:
            raise ValueError("large_plan_call: one prefix per row, and no stray rows with fixed prefixes")
        prefix = list(prefixes)
        rpi = [rng.randrange(1, max_reqs) for _ in range(bs)]
    extend = [rng.choice([0, 1, rng.randint(1, 64), -2]) for _ in range(bs)]
    lut_t = (torch.randint(-1, full_slots, (max(1, full_slots - 5),), dtype=torch.int64, generator=gen)
             if lut or window else None)  # an SWA window needs the LUT
    pool_t = torch.randint(-5, 50000, (max_reqs, cols + 2), dtype=torch.int32, generator=gen) if pool else None
    valid = torch.tensor([rng.randint(0, cols + 3) for _ in range(bs)], dtype=torch.int64) if pool else None
    ws = [max(0, p - window) if window else 0 for p in prefix]
    total = sum(p - w for p, w, r in zip(prefix, ws, rpi, strict=True) if r != 0)
    cap = max(1, total + (rng.choice([0, 5]) if slack is None else slack))
    wcap = bs + 2
    token_offset = rng.choice([0, 1])
    init = torch.randint(-9, 99, (4 * cap + 2 * wcap + 1,), dtype=torch.int64, generator=gen)

    def make(device: Device) -> Kwargs:
        v = init[: 4 * cap].view(4, cap).to(device)
        vp = VerifyPlan(verify_slot_indices=v[0].clone(), verify_expected_tokens=v[1].clone(),
                        verify_expected_positions=v[2].clone(), verify_prev_slot_indices=v[3].clone(),
                        verify_num_valid=one_element(77, torch.int32, device),
                        enable=one_element(5, torch.int32, device),
                        verify_offsets_scratch=torch.full((PLAN_OFFSETS_SCRATCH_LEN,), 3, dtype=torch.int64,
                                                          device=device))
        w = init[4 * cap :]
        wp = write_plan(w[: wcap + 1], w[wcap + 1 :], num_valid=99, device=device)
        return plan_kwargs(vp, wp, int64_tensor(rpi, device), int64_tensor(prefix, device),
                           int64_tensor(extend, device), r2t.to(device),
                           window=window, lut=None if lut_t is None else lut_t.to(device),
                           pool=None if pool_t is None else pool_t.to(device),
                           valid=None if valid is None else valid.to(device), token_offset=token_offset)

    return Call(Op.PLAN, make, plan_outputs, label=f"plan bs={bs} x {max_prefix}")


def large_scatter_call(seed: random.Random | int, *, bs: int, rows: int, cols: int) -> Call:
    """``bs`` requests of 0, up to twice ``cols``, or ``cols`` tokens into a pool of ``rows`` x ``cols``; a few
    rows past the pool; the last request runs past ``flat_in``."""
    rng = _rng(seed)
    lens = [rng.choice([0, rng.randint(1, 2 * cols), cols]) for _ in range(bs)]
    offsets = offsets_of(lens)
    rpi = [rng.randrange(rows) if rng.random() < 0.97 else rng.choice([-1, rows]) for _ in range(bs)]
    ntok = max(offsets[-1] - 5, 0)
    flat = torch.randint(-(2**40), 2**40, (ntok,), dtype=torch.int64, generator=_gen(rng))
    pool = torch.randint(-50, 50, (rows, cols), dtype=torch.int32, generator=_gen(rng))
    return _scatter(flat, offsets, rpi, pool, f"scatter {bs} x {cols}")



def fuzz(op: Op, device: torch.device | str, backend: str, *, seed: int, count: int, hostile: bool) -> list[str]:
    """``count`` fresh scenarios of ``op`` from ``random.Random(seed)``, each checked against torch_ref on the
    CPU; one line per failing call, saying what reproduces it."""
    rng = random.Random(seed)
    failures: list[str] = []
    for i in range(count):
        call = GENERATORS[op](rng, hostile=hostile)
        problems = check_call(call, device, backend)
        if problems:
            failures.append(f"{op.value} call {i} ({call.label}) of random.Random({seed}), hostile={hostile}: "
                            + "; ".join(problems))
    return failures


def opcheck_random(op: Op, device: Device, backend: str, count: int) -> None:
    """opcheck ``count`` fresh random valid calls of ``op``; a failure names the seed that reproduces it."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    for _ in range(count):
        call = GENERATORS[op](rng)
        try:
            opcheck(op, call.make(device), backend)
        except AssertionError as exc:
            raise AssertionError(f"{op.value} {call.label} from random.Random({seed}): {exc}") from exc

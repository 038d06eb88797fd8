"""Every input kvcanary's tests and benchmarks launch with, for every backend and every size.

One set of builders serves three families:

- **core builders** (:func:`context`, :func:`verify_plan`, :func:`write_plan`, :func:`write_kwargs`,
  :func:`plan_kwargs`, :func:`plan_offsets_kwargs`, :func:`plan_entries_kwargs`): one launch's arguments from
  given tensors, on their device. Everything below is made of them.
- **parity scenarios**: :data:`GENERATORS` (one random generator per operation, small, realistic or
  ``hostile``) and the larger seeded calls (:func:`large_verify_call`, :func:`large_write_call`,
  :func:`large_plan_call`, :func:`large_scatter_call`: many grid-stride rounds, long requests, long plan rows).
  Each returns a :class:`Call`: a recipe that builds fresh keyword arguments on any device from CPU master
  tensors, so every backend sees identical, unshared inputs, and names the tensors the launch may change.
  Worlds are built like an engine builds them: chains of slots written with the real hash, shared prefixes,
  padding rows, a partly filled ring; then some fraction is corrupted (fields, KV bytes) and, when
  ``hostile`` is set, indices point outside their tensors.
- **benchmark workloads**, built on the device with tensor operations and clean (nothing to report), at any
  size: :class:`RandomPrevRecords`, :func:`stamp_chains`, :func:`chain_writes`, :func:`decode_writes`,
  :class:`PlanBatch`, :func:`scatter_sets`, :func:`byte_sources`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kvcanary.consts import (
    CANARY_SLOT_BYTES,
    INVALID_SLOT,
    PLAN_OFFSETS_SCRATCH_LEN,
    VIOLATION_FIELDS,
    CanaryLaunchTag,
    RealKvHashMode,
)
from kvcanary.context import VerifyOrWriteContext
from kvcanary.hashing import ANCHOR_HASH, real_kv_hash, record_hash, to_int64
from kvcanary.launch.plan_offsets import launch_plan_offsets_kernel
from kvcanary.launch.write import launch_canary_write_kernel
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.registry import Op
from kvcanary.sources import RealKvSource
from kvcanary_backends.torch_ref._hash import mix3, splitmix64
from kvcanary_backends.torch_ref._records import fold_sources

Device = torch.device | str
Kwargs = dict[str, Any]
Outputs = dict[str, torch.Tensor]


@dataclass
class Call:
    """One launch: how to build its arguments, and which of them it may change."""

    op: Op
    make: Callable[[Device], Kwargs]
    outputs: Callable[[Kwargs], Outputs]
    ring_base: int | None = None
    order_sensitive: bool = False
    label: str = ""


def _gen(rng: random.Random) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(rng.getrandbits(62))
    return g


def _rng(seed: random.Random | int) -> random.Random:
    return seed if isinstance(seed, random.Random) else random.Random(seed)


def _i64(values: Sequence[int] | torch.Tensor, device: Device) -> torch.Tensor:
    """A fresh int64 tensor on ``device`` (a copy even of a tensor already there: masters stay untouched)."""
    if isinstance(values, torch.Tensor):
        return values.to(device=device, dtype=torch.int64, copy=True)
    return torch.tensor(list(values), dtype=torch.int64, device=device)


def _one(value: int, dtype: torch.dtype, device: Device) -> torch.Tensor:
    return torch.tensor([value], dtype=dtype, device=device)


def offsets_of(lengths: Sequence[int]) -> list[int]:
    """Exclusive offsets of requests of ``lengths`` tokens, then the total."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + n)
    return out


# -- core builders ----------------------------------------------------------------------------------------
def context(device: Device = "cpu", *, num_slots: int = 16, canary_buf: torch.Tensor | None = None,
            sources: Sequence[RealKvSource] = (), mode: RealKvHashMode = RealKvHashMode.NONE,
            ring: int | torch.Tensor = 1024, write_index: int = 0, slot_counter: int = 0, kernel_counter: int = 0,
            chain_assert: bool = True, kind: CanaryLaunchTag = CanaryLaunchTag.TAIL_K_FULL) -> VerifyOrWriteContext:
    """A context: ``canary_buf`` as given (shared, not copied; its device is the context's), else
    ``num_slots`` zero records on ``device``; a ring of ``ring`` zero rows (or the rows given, moved there);
    the write index, counters and chain-position assert as given."""
    buf = (canary_buf if canary_buf is not None
           else torch.zeros(num_slots, CANARY_SLOT_BYTES, dtype=torch.uint8, device=device))
    dev = buf.device
    rows = (torch.zeros(ring, VIOLATION_FIELDS, dtype=torch.int64, device=dev) if isinstance(ring, int)
            else ring.to(dev))
    return VerifyOrWriteContext(
        canary_buf=buf, kernel_kind=kind, violation_ring=rows,
        violation_write_index=_one(write_index, torch.int32, dev),
        slot_run_counter=_one(slot_counter, torch.int64, dev),
        kernel_run_counter=_one(kernel_counter, torch.int64, dev),
        real_kv_sources=tuple(sources), real_kv_hash_mode=mode,
        enable_chain_position_assert=_one(int(chain_assert), torch.int32, dev))


def context_outputs(kw: Kwargs) -> Outputs:
    """What a verify or write launch may change: the context's buffer, ring, index and counters."""
    ctx: VerifyOrWriteContext = kw["context"]
    return {"canary_buf": ctx.canary_buf, "violation_ring": ctx.violation_ring,
            "violation_write_index": ctx.violation_write_index, "slot_run_counter": ctx.slot_run_counter,
            "kernel_run_counter": ctx.kernel_run_counter}


def verify_plan(slots: torch.Tensor, prevs: torch.Tensor, positions: torch.Tensor,
                tokens: torch.Tensor | None = None, *, num_valid: int | None = None, enable: int = 1) -> VerifyPlan:
    """A plan over the given int64 columns (one length, the capacity; their device): ``tokens=None`` is -1
    everywhere (no token check); ``num_valid`` defaults to the capacity."""
    dev = slots.device
    return VerifyPlan(
        verify_slot_indices=slots.contiguous(), verify_prev_slot_indices=prevs.contiguous(),
        verify_expected_positions=positions.contiguous(),
        verify_expected_tokens=torch.full_like(slots, -1) if tokens is None else tokens.contiguous(),
        verify_num_valid=_one(slots.shape[0] if num_valid is None else num_valid, torch.int32, dev),
        enable=_one(enable, torch.int32, dev))


def _rows_plan(rows: torch.Tensor, device: Device, *, num_valid: int, enable: int = 1) -> VerifyPlan:
    """A plan from CPU rows ``[capacity, 4]`` of (slot, predecessor, position, token)."""
    slots, prevs, pos, toks = (rows[:, k].contiguous().to(device, copy=True) for k in range(4))
    return verify_plan(slots, prevs, pos, toks, num_valid=num_valid, enable=enable)


def write_plan(offsets: Sequence[int] | torch.Tensor, seeds: Sequence[int] | torch.Tensor, *,
               num_valid: int | None = None, device: Device = "cpu") -> WritePlan:
    """A write plan: request offsets (capacity + 1 of them), seed slots, ``num_valid`` (default: every row)."""
    seed_t = _i64(seeds, device)
    return WritePlan(write_offsets=_i64(offsets, device), write_seed_slot_indices=seed_t,
                     write_num_valid_reqs=_one(seed_t.shape[0] if num_valid is None else num_valid, torch.int32,
                                               device))


def write_kwargs(ctx: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor, positions: torch.Tensor,
                 out_cache_loc: torch.Tensor, *, expected_tokens: torch.Tensor | None = None,
                 expected_positions: torch.Tensor | None = None) -> Kwargs:
    """A write launch's arguments; the input assert is on when expected tensors are given."""
    return {"context": ctx, "plan": plan, "input_ids": input_ids, "positions": positions,
            "out_cache_loc": out_cache_loc, "enable_write_input_assert": expected_tokens is not None,
            "expected_input_tokens": expected_tokens, "expected_input_positions": expected_positions}


def plan_kwargs(verify_plan_out: VerifyPlan, write_plan_out: WritePlan, req_pool_indices: torch.Tensor,
                prefix_lens: torch.Tensor, extend_seq_lens: torch.Tensor, req_to_token: torch.Tensor, *,
                window: int = 0, lut: torch.Tensor | None = None, pool: torch.Tensor | None = None,
                valid: torch.Tensor | None = None, capacity: int | None = None, token_offset: int = 0) -> Kwargs:
    """A fused plan launch's arguments (``capacity`` defaults to the verify plan's)."""
    return {"verify_plan_out": verify_plan_out, "write_plan_out": write_plan_out,
            "req_pool_indices": req_pool_indices, "prefix_lens": prefix_lens, "extend_seq_lens": extend_seq_lens,
            "req_to_token": req_to_token, "swa_window_size": window, "full_to_swa_index_mapping": lut,
            "verify_capacity": verify_plan_out.verify_capacity if capacity is None else capacity,
            "req_to_verify_expected_tokens": pool, "req_to_verify_expected_tokens_valid_lens": valid,
            "kv_token_id_vs_position_offset": token_offset}


def plan_outputs(kw: Kwargs, *, scratch: bool = True) -> Outputs:
    """What a fused plan may change: every field of both plans (the offsets scratch if asked and present)."""
    vp: VerifyPlan = kw["verify_plan_out"]
    wp: WritePlan = kw["write_plan_out"]
    names = ["verify_slot_indices", "verify_expected_tokens", "verify_expected_positions",
             "verify_prev_slot_indices", "verify_num_valid", "enable"]
    if scratch and vp.verify_offsets_scratch is not None:
        names.append("verify_offsets_scratch")
    out = {f"verify_plan_out.{k}": getattr(vp, k) for k in names}
    out.update({f"write_plan_out.{k}": getattr(wp, k) for k in
                ("write_offsets", "write_seed_slot_indices", "write_num_valid_reqs")})
    return out


def plan_offsets_kwargs(plan_kw: Kwargs, scratch: torch.Tensor) -> Kwargs:
    """Stage 1 of the plan ``plan_kw`` describes, alone: it fills ``scratch`` and the plans' counts and offsets."""
    vp: VerifyPlan = plan_kw["verify_plan_out"]
    wp: WritePlan = plan_kw["write_plan_out"]
    return {"req_pool_indices": plan_kw["req_pool_indices"], "prefix_lens": plan_kw["prefix_lens"],
            "extend_seq_lens": plan_kw["extend_seq_lens"], "req_to_token": plan_kw["req_to_token"],
            "full_to_swa_index_mapping": plan_kw["full_to_swa_index_mapping"], "out_verify_offsets_scratch": scratch,
            "out_write_offsets": wp.write_offsets, "out_write_seed_slot_indices": wp.write_seed_slot_indices,
            "out_verify_num_valid": vp.verify_num_valid, "out_verify_enable": vp.enable,
            "out_write_num_valid_reqs": wp.write_num_valid_reqs, "swa_window_size": plan_kw["swa_window_size"],
            "verify_capacity": plan_kw["verify_capacity"]}


def plan_entries_kwargs(plan_kw: Kwargs, scratch: torch.Tensor, enable: torch.Tensor | None = None) -> Kwargs:
    """Stage 2 of the plan ``plan_kw`` describes, alone: the verify entries from stage 1's ``scratch``
    (``enable`` defaults to the verify plan's)."""
    vp: VerifyPlan = plan_kw["verify_plan_out"]
    return {"req_pool_indices": plan_kw["req_pool_indices"], "prefix_lens": plan_kw["prefix_lens"],
            "req_to_token": plan_kw["req_to_token"], "full_to_swa_index_mapping": plan_kw["full_to_swa_index_mapping"],
            "verify_offsets_scratch": scratch, "verify_enable": vp.enable if enable is None else enable,
            "req_to_verify_expected_tokens": plan_kw["req_to_verify_expected_tokens"],
            "req_to_verify_expected_tokens_valid_lens": plan_kw["req_to_verify_expected_tokens_valid_lens"],
            "out_verify_slot_indices": vp.verify_slot_indices, "out_verify_expected_tokens": vp.verify_expected_tokens,
            "out_verify_expected_positions": vp.verify_expected_positions,
            "out_verify_prev_slot_indices": vp.verify_prev_slot_indices,
            "kv_token_id_vs_position_offset": plan_kw["kv_token_id_vs_position_offset"],
            "swa_window_size": plan_kw["swa_window_size"]}


_OFFSETS_OUT = ("out_verify_offsets_scratch", "out_write_offsets", "out_write_seed_slot_indices",
                "out_verify_num_valid", "out_verify_enable", "out_write_num_valid_reqs")
_ENTRIES_OUT = ("out_verify_slot_indices", "out_verify_expected_tokens", "out_verify_expected_positions",
                "out_verify_prev_slot_indices")


def _named(names: Sequence[str]) -> Callable[[Kwargs], Outputs]:
    return lambda kw: {k: kw[k] for k in names}


def _moved(sources: Sequence[RealKvSource], device: Device) -> tuple[RealKvSource, ...]:
    return tuple(RealKvSource(tensor=s.tensor.to(device), page_size=s.page_size,
                              num_bytes_per_token=s.num_bytes_per_token, read_bytes=s.read_bytes) for s in sources)


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


# -- random scenarios: verify ------------------------------------------------------------------------------
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
            verify_num_valid=_one(77, torch.int32, device), enable=_one(5, torch.int32, device),
            verify_offsets_scratch=(torch.full((PLAN_OFFSETS_SCRATCH_LEN,), 3, dtype=torch.int64, device=device)
                                    if with_scratch else None))
        wp = write_plan(init_w[: wcap + 1], init_w[wcap + 1 :], num_valid=99, device=device)
        return plan_kwargs(vp, wp, _i64(rpi, device), _i64(prefix, device), _i64(extend, device), r2t.to(device),
                           window=swa, lut=None if lut is None else lut.to(device), capacity=cap,
                           pool=None if pool is None else pool.to(device),
                           valid=None if valid is None else valid.to(device), token_offset=offset)

    return Call(Op.PLAN, make, lambda kw: plan_outputs(kw, scratch=False), label="plan")


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
        return plan_entries_kwargs(base.make(device), scratch.to(device), _one(enable, torch.int32, device))

    return Call(Op.PLAN_ENTRIES, make, _named(_ENTRIES_OUT), label="plan_entries")


# -- random scenarios: scatter -----------------------------------------------------------------------------
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
        return {"flat_in": flat.to(device), "offsets": _i64(offsets, device), "req_pool_indices": _i64(rpi, device),
                "pool_out": pool.clone().to(device)}

    return Call(Op.SCATTER, make, _named(("pool_out",)), label=label)


GENERATORS: dict[Op, Callable[..., Call]] = {
    Op.VERIFY: verify_call,
    Op.WRITE: write_call,
    Op.PLAN: plan_call,
    Op.PLAN_OFFSETS: plan_offsets_call,
    Op.PLAN_ENTRIES: plan_entries_call,
    Op.SCATTER: scatter_call,
}
"""One random scenario generator per operation: ``GENERATORS[op](rng, hostile=...) -> Call``."""


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
            return _i64([*xs, 7, 7], device)  # a padded tail

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
                        verify_num_valid=_one(77, torch.int32, device), enable=_one(5, torch.int32, device),
                        verify_offsets_scratch=torch.full((PLAN_OFFSETS_SCRATCH_LEN,), 3, dtype=torch.int64,
                                                          device=device))
        w = init[4 * cap :]
        wp = write_plan(w[: wcap + 1], w[wcap + 1 :], num_valid=99, device=device)
        return plan_kwargs(vp, wp, _i64(rpi, device), _i64(prefix, device), _i64(extend, device), r2t.to(device),
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


# -- benchmark workloads (built on the device; clean) ---------------------------------------------------------
_CHUNK = 1 << 22  # slots stamped per pass, to bound temporaries at any buffer size


def _device_gen(device: Device, seed: int) -> torch.Generator:
    return torch.Generator(device=torch.device(device)).manual_seed(seed)


def byte_sources(num_slots: int, nbpt: int, count: int, device: Device, *, seed: int = 0) -> tuple[RealKvSource, ...]:
    """``count`` token-major real-KV sources (one ``nbpt``-byte strip of random bytes per slot, read whole)."""
    g = _device_gen(device, seed)
    return tuple(RealKvSource(tensor=torch.randint(0, 256, (num_slots, nbpt), dtype=torch.uint8, device=device,
                                                   generator=g),
                              page_size=1, num_bytes_per_token=nbpt, read_bytes=nbpt) for _ in range(count))


class RandomPrevRecords:
    """A canary buffer on ``device`` whose every upper-half slot ``s`` chains to a lower-half slot
    :meth:`prev_of` ``(s)`` (a hash of ``s``): random records, the upper half's chain hashes stamped consistent
    with their predecessors, so any sample of upper-half slots verifies clean and each entry reads two
    independent (cold) records. Real-KV hashes are 0 (mode NONE) until :meth:`stamp_real_kv`."""

    def __init__(self, num_slots: int, device: Device, *, seed: int = 0) -> None:
        self.num_slots, self.half, self.device = num_slots, num_slots // 2, torch.device(device)
        rec = torch.randint(-(2**62), 2**62, (num_slots, 4), dtype=torch.int64, device=device,
                            generator=_device_gen(device, seed))
        rec[:, 3] = 0
        for start in range(self.half, num_slots, _CHUNK):
            s = torch.arange(start, min(num_slots, start + _CHUNK), device=device)
            p = self.prev_of(s)
            rec[s, 2] = mix3(rec[p, 2], rec[p, 0], rec[p, 1])
        self.records = rec
        self.buf = rec.view(torch.uint8).view(num_slots, CANARY_SLOT_BYTES)
        self._stamped: tuple[tuple[int, ...], int] = ((), int(RealKvHashMode.NONE))

    def prev_of(self, slots: torch.Tensor) -> torch.Tensor:
        return 1 + (splitmix64(slots) & ((1 << 62) - 1)) % (self.half - 1)

    def index_sets(self, entries: int, count: int, *, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """``count`` sets of (``entries`` random upper-half slots, their predecessors)."""
        g = _device_gen(self.device, seed)
        out = []
        for _ in range(count):
            s = torch.randint(self.half, self.num_slots, (entries,), device=self.device, generator=g)
            out.append((s, self.prev_of(s)))
        return out

    def plan(self, slots: torch.Tensor, prevs: torch.Tensor) -> VerifyPlan:
        """The plan verifying ``slots`` against ``prevs``, expecting their stored positions and tokens."""
        r = self.records[slots]
        return verify_plan(slots, prevs, r[:, 1], r[:, 0])

    def stamp_real_kv(self, sources: Sequence[RealKvSource], mode: RealKvHashMode) -> None:
        """Make the upper half's real-KV hashes those of ``sources`` under ``mode`` (NONE: zero)."""
        key = (tuple(id(s.tensor) for s in sources), int(mode))
        if key == self._stamped:
            return
        for start in range(self.half, self.num_slots, _CHUNK):
            s = torch.arange(start, min(self.num_slots, start + _CHUNK), device=self.device)
            self.records[s, 3] = fold_sources(sources, int(mode), s)[0]
        self._stamped = key

    def context(self, sources: Sequence[RealKvSource] = (), mode: RealKvHashMode = RealKvHashMode.NONE,
                **kw: Any) -> VerifyOrWriteContext:
        """A fresh context over this buffer (ring, counters); stamps the real-KV hashes ``sources`` need."""
        self.stamp_real_kv(sources, mode)
        return context(canary_buf=self.buf, sources=sources, mode=mode, **kw)


def _token_ids(n: int, device: Device) -> torch.Tensor:
    return (torch.arange(n, device=device) * 7919) % 50021


def chain_writes(ctx: VerifyOrWriteContext, lengths: Sequence[int], locs: torch.Tensor, *,
                 seeds: Sequence[int] | torch.Tensor | None = None, start: int = 0) -> Kwargs:
    """Write arguments of requests of ``lengths`` tokens stored at ``locs`` (in order, on ``ctx``'s device):
    each a new chain (seed -1) unless ``seeds`` are given, positions ``start`` onwards in each request."""
    dev = locs.device
    offs = offsets_of(lengths)
    n = offs[-1]
    counts = _i64(lengths, dev)
    positions = torch.arange(n, device=dev) - torch.repeat_interleave(_i64(offs[:-1], dev), counts) + start
    plan = write_plan(offs, [-1] * len(lengths) if seeds is None else seeds, device=dev)
    return write_kwargs(ctx, plan, _token_ids(n, dev), positions, locs[:n].contiguous())


def stamp_chains(ctx: VerifyOrWriteContext, slots: torch.Tensor, length: int, *,
                 backend: str | None = None) -> VerifyPlan:
    """Write ``slots`` as chains of ``length`` tokens (one request each, through the public write launcher,
    ``backend`` forced if given) and return the plan that verifies them: the layout a real batch gives, each
    entry's predecessor the entry before it (a cache hit), positions 0 onwards, the tokens written."""
    n = slots.shape[0] - slots.shape[0] % length
    kw = chain_writes(ctx, [length] * (n // length), slots)
    launch_canary_write_kernel(**kw, backend=backend)
    s = kw["out_cache_loc"]
    pos = kw["positions"]
    return verify_plan(s, torch.where(pos == 0, -1, torch.roll(s, 1)), pos, kw["input_ids"])


def decode_writes(ctx: VerifyOrWriteContext, heads: torch.Tensor, slots: torch.Tensor, *,
                  backend: str | None = None) -> Kwargs:
    """A decode step's write: one token per request at ``slots``, continuing chains whose heads (position 0,
    stamped now by one write through the public launcher) sit at ``heads``; the chain-position assert holds."""
    launch_canary_write_kernel(**chain_writes(ctx, [1] * heads.shape[0], heads), backend=backend)
    return chain_writes(ctx, [1] * slots.shape[0], slots, seeds=heads, start=1)


class PlanBatch:
    """A plan launch's batch on ``device``: ``bs`` requests of ``prefix`` cached tokens and one new token each,
    with ``sets`` req_to_token tensors (and token pools) and plan outputs to use in turn (so that a launch's
    traffic comes from DRAM: four sets of 1 Mi entries are 128 MiB, more than L2 holds)."""

    def __init__(self, bs: int = 256, prefix: int = 4096, sets: int = 1, *, device: Device, pools: bool = False,
                 num_slots: int = 1 << 24, seed: int = 0) -> None:
        cols = prefix + 8
        g = _device_gen(device, seed)
        self.bs, self.prefix, self.entries = bs, prefix, bs * prefix
        self.rpi = torch.arange(1, bs + 1, device=device)
        self.prefix_lens = torch.full((bs,), prefix, dtype=torch.int64, device=device)
        self.extend = torch.ones(bs, dtype=torch.int64, device=device)
        self.rtts = [torch.randint(1, num_slots, (bs + 1, cols), dtype=torch.int32, device=device, generator=g)
                     for _ in range(sets)]
        self.pools = [torch.randint(0, 50000, (bs + 1, cols), dtype=torch.int32, device=device, generator=g)
                      for _ in range(sets if pools else 0)]
        self.valid = torch.full((bs,), cols, dtype=torch.int64, device=device)
        self.vps = [VerifyPlan.allocate(verify_capacity=self.entries, device=device) for _ in range(sets)]
        self.wps = [WritePlan.allocate(write_req_capacity=bs, device=device) for _ in range(sets)]

    def kwargs(self, i: int = 0, *, pool: bool = False, window: int = 0, lut: torch.Tensor | None = None,
               **over: Any) -> Kwargs:
        """A fused plan over set ``i`` (an SWA ``window`` with ``lut``; ``over`` replaces any argument)."""
        kw = plan_kwargs(self.vps[i], self.wps[i], self.rpi, self.prefix_lens, self.extend, self.rtts[i],
                         window=window, lut=lut if window else None, pool=self.pools[i] if pool else None,
                         valid=self.valid if pool else None, capacity=self.entries)
        kw.update(over)
        return kw


def scatter_sets(bs: int, per: int, sets: int, device: Device, *, seed: int = 0) -> list[Kwargs]:
    """``sets`` scatters of ``bs`` requests x ``per`` tokens into pool rows 1..bs, each set in its own memory
    (the same tokens): called in turn, their traffic comes from DRAM."""
    out = []
    for _ in range(sets):
        g = _device_gen(device, seed)
        out.append({"flat_in": torch.randint(0, 1 << 40, (bs * per,), device=device, generator=g),
                    "offsets": torch.arange(bs + 1, device=device) * per,
                    "req_pool_indices": torch.arange(1, bs + 1, device=device),
                    "pool_out": torch.zeros(bs + 1, per, dtype=torch.int32, device=device)})
    return out

"""Hostile launches for the parity tests: every device tensor drawn from extreme values, each allocated as a view
in the middle of a guard buffer.

Each strategy draws one launch of one operation (small shapes: the Triton interpreter is slow) whose device
values are hostile: lengths and offsets at the int64 limits (sums that would wrap), slots and rows outside
their tensors, INVALID_SLOT, counts past the capacities or negative, a write index at the int32 limits, an
empty ring, LUTs and pools shorter than the rows that index them, launch tags outside CanaryLaunchTag.
Every call still passes its contract (shapes, dtypes, scalars): what is hostile is the data.

:class:`Guarded` builds the call on a device with every tensor a view in the middle of its own buffer of
``GUARD`` pattern bytes on each side (16-byte aligned, so alignment rules still hold), and afterwards says
which guards a launch overwrote. :func:`run` launches a recipe on a backend and returns its outputs and the
damaged guards; :func:`compare` runs torch_ref on the CPU and a backend on a device and lists every
difference (outputs byte for byte, rings as multisets where a parallel backend may order rows freely).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from hypothesis import strategies as st

from kvcanary.consts import INVALID_SLOT, PLAN_OFFSETS_SCRATCH_LEN, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.registry import Op
from kvcanary.sources import RealKvSource
from kvcanary.testing.builders import Call
from kvcanary.testing.parity import compare_outputs, launcher, without_unspecified

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
I64_EXTREMES = (I64_MIN, I64_MIN + 1, -(2**62), -(2**32), -1, 2**31, 2**32, 2**62, I64_MAX - 1, I64_MAX)
I32_EXTREMES = (I32_MIN, I32_MIN + 1, -1, I32_MAX - 1, I32_MAX)
PAD = 64  # guard bytes on each side of a tensor (a multiple of 16: views stay 16-byte aligned)
GUARD = 0xA5

Kwargs = dict[str, Any]
Outputs = dict[str, torch.Tensor]


def hostile(small: st.SearchStrategy[int], extremes: Sequence[int] = I64_EXTREMES) -> st.SearchStrategy[int]:
    """Mostly ``small`` values, often an extreme one."""
    return st.one_of(small, small, st.sampled_from(tuple(extremes)))


def i64s(draw: st.DrawFn, n: int, small: st.SearchStrategy[int]) -> list[int]:
    return [draw(hostile(small)) for _ in range(n)]


class Guarded:
    """Builds tensors on ``device`` as views in the middle of guard buffers, and checks the guards."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.buffers: list[tuple[str, torch.Tensor, int]] = []

    def __call__(self, name: str, values: Sequence[int] | torch.Tensor, dtype: torch.dtype = torch.int64,
                 shape: Sequence[int] | None = None) -> torch.Tensor:
        src = values if isinstance(values, torch.Tensor) else torch.tensor(list(values), dtype=dtype)
        src = src.to(dtype)
        if shape is not None:
            src = src.reshape(tuple(shape))
        nbytes = src.numel() * src.element_size()
        base = torch.full((2 * PAD + nbytes,), GUARD, dtype=torch.uint8, device=self.device)
        view = base[PAD : PAD + nbytes].view(src.dtype).view(src.shape)
        view.copy_(src.to(self.device))
        self.buffers.append((name, base, nbytes))
        return view

    def damaged(self) -> list[str]:
        """Names of the tensors whose guard bytes changed (something wrote outside them)."""
        bad = []
        for name, base, nbytes in self.buffers:
            b = base.cpu()
            if bool((b[:PAD] != GUARD).any()) or bool((b[PAD + nbytes :] != GUARD).any()):
                bad.append(name)
        return bad


Builder = Callable[[Guarded], Kwargs]


@dataclass
class Recipe:
    """One hostile launch: how to build it (guarded) and what it may change."""

    op: Op
    build: Builder
    outputs: Callable[[Kwargs], Outputs]
    ring_base: int | None = None
    order_sensitive: bool = False
    label: str = ""
    detail: str = ""  # what was drawn, for a failure message
    last: dict[str, Guarded] = field(default_factory=dict)

    def call(self) -> Call:
        """The recipe as a parity :class:`Call` (each ``make`` keeps its guards in ``last``)."""

        def make(device: torch.device | str) -> Kwargs:
            g = Guarded(device)
            self.last[str(torch.device(device))] = g
            return self.build(g)

        return Call(self.op, make, self.outputs, self.ring_base, self.order_sensitive, self.label)


def run(recipe: Recipe, device: torch.device | str, backend: str) -> tuple[Outputs, list[str]]:
    """Launch ``recipe`` (made specified: see parity.without_unspecified) on ``backend``; outputs and damaged
    guards."""
    call = without_unspecified(recipe.call())
    kw = call.make(device)
    guards = recipe.last[str(torch.device(device))]
    launcher(call.op)(**kw, backend=backend)
    out = {k: v.detach().cpu().clone() for k, v in call.outputs(kw).items()}
    return out, guards.damaged()


def compare(recipe: Recipe, device: torch.device | str, backend: str) -> list[str]:
    """Every difference between torch_ref on the CPU and ``backend`` on ``device``, and every damaged guard."""
    want, bad_ref = run(recipe, "cpu", "torch_ref")
    got, bad = run(recipe, device, backend)
    problems = [f"torch_ref wrote outside {n}" for n in bad_ref] + [f"{backend} wrote outside {n}" for n in bad]
    problems += compare_outputs(got, want, base=recipe.ring_base, order_sensitive=recipe.order_sensitive)
    if problems and recipe.detail:
        problems.append(f"drawn: {recipe.detail}")
    return problems


# -- contexts (verify, write) -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class SourceDraw:
    data: torch.Tensor  # uint8 [rows, page * nbpt]
    page: int
    nbpt: int
    read_bytes: int


@dataclass(frozen=True)
class ContextDraw:
    """Everything of a verify / write context, drawn on the CPU."""

    records: torch.Tensor  # int64 [num_slots, stride_words]
    ring: torch.Tensor  # int64 [ring_cap, 8]
    write_index: int
    slot_counter: int
    kernel_counter: int
    kind: int
    mode: RealKvHashMode
    sources: tuple[SourceDraw, ...]
    chain_assert: int

    @property
    def num_slots(self) -> int:
        return int(self.records.shape[0])

    def build(self, g: Guarded) -> VerifyOrWriteContext:
        srcs = tuple(RealKvSource(tensor=g(f"source{i}", s.data, torch.uint8), page_size=s.page,
                                  num_bytes_per_token=s.nbpt, read_bytes=s.read_bytes)
                     for i, s in enumerate(self.sources))
        return VerifyOrWriteContext(
            canary_buf=g("canary_buf", self.records).view(torch.uint8).view(self.num_slots, -1),
            kernel_kind=self.kind,  # type: ignore[arg-type]  # any int64 tag: written verbatim into rows
            violation_ring=g("violation_ring", self.ring),
            violation_write_index=g("violation_write_index", [self.write_index], torch.int32),
            slot_run_counter=g("slot_run_counter", [self.slot_counter]),
            kernel_run_counter=g("kernel_run_counter", [self.kernel_counter]),
            real_kv_sources=srcs, real_kv_hash_mode=self.mode,
            enable_chain_position_assert=g("enable_chain_position_assert", [self.chain_assert], torch.int32))


def context_outputs(kw: Kwargs) -> Outputs:
    ctx: VerifyOrWriteContext = kw["context"]
    return {"canary_buf": ctx.canary_buf, "violation_ring": ctx.violation_ring,
            "violation_write_index": ctx.violation_write_index, "slot_run_counter": ctx.slot_run_counter,
            "kernel_run_counter": ctx.kernel_run_counter}


def _bytes(draw: st.DrawFn, n: int) -> torch.Tensor:
    seed = draw(st.integers(0, 2**32 - 1))
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


@st.composite
def contexts(draw: st.DrawFn, max_slots: int = 6) -> ContextDraw:
    """A context of 1..max_slots records (random words, at times extreme), a ring of 0..3 rows, a write index
    and counters at their limits, a hostile launch tag, 0..2 sources (some shorter than the buffer)."""
    n = draw(st.integers(1, max_slots))
    words = draw(st.sampled_from([4, 5, 8]))  # slot stride 32, 40 or 64 bytes
    recs = torch.tensor(i64s(draw, n * words, st.integers(-3, 12)), dtype=torch.int64).view(n, words)
    cap = draw(st.integers(0, 3))
    ring = torch.tensor(i64s(draw, cap * 8, st.integers(-9, 99)), dtype=torch.int64).view(cap, 8)
    wi = draw(st.one_of(st.integers(0, cap + 1), st.sampled_from((-2, *I32_EXTREMES))))
    sources = []
    mode = draw(st.sampled_from(list(RealKvHashMode)))
    for _ in range(draw(st.integers(0, 2))):
        page = draw(st.sampled_from([1, 2]))
        nbpt = draw(st.sampled_from([16, 32]))
        read = draw(st.sampled_from([16, nbpt]))
        rows = draw(st.integers(1, (n + page - 1) // page + 1))  # sometimes short of the buffer: strips OOB
        sources.append(SourceDraw(_bytes(draw, rows * page * nbpt).view(rows, page * nbpt), page, nbpt, read))
    return ContextDraw(recs, ring, wi, draw(hostile(st.integers(0, 99))), draw(hostile(st.integers(0, 99))),
                       draw(hostile(st.integers(-1, 12))), mode, tuple(sources), draw(st.integers(0, 1)))


def _slots(n: int) -> st.SearchStrategy[int]:
    return st.one_of(st.integers(0, n - 1), st.sampled_from((0, n, n + 1, -1, -7, INVALID_SLOT, I64_MAX)))


def _order_sensitive(base: int, cap: int, rows: int) -> bool:
    """Whether which rows a parallel backend keeps depends on their order (the ring fills part-way)."""
    return not (base >= cap or (base >= 0 and base + rows <= cap))


@st.composite
def verify_recipes(draw: st.DrawFn) -> Recipe:
    ctx = draw(contexts())
    n = ctx.num_slots
    cap = draw(st.integers(0, 5))
    slots = [draw(_slots(n)) for _ in range(cap)]
    prevs = [draw(_slots(n)) for _ in range(cap)]
    poss = i64s(draw, cap, st.integers(-1, 12))
    toks = i64s(draw, cap, st.integers(-1, 12))
    nv = draw(st.one_of(st.integers(0, cap + 1), st.sampled_from(I32_EXTREMES)))
    en = draw(st.sampled_from([0, 1, 1, 2, -1]))
    check = draw(st.booleans())

    def build(g: Guarded) -> Kwargs:
        plan = VerifyPlan(verify_slot_indices=g("verify_slot_indices", slots),
                          verify_expected_tokens=g("verify_expected_tokens", toks),
                          verify_expected_positions=g("verify_expected_positions", poss),
                          verify_prev_slot_indices=g("verify_prev_slot_indices", prevs),
                          verify_num_valid=g("verify_num_valid", [nv], torch.int32),
                          enable=g("enable", [en], torch.int32))
        return {"context": ctx.build(g), "plan": plan, "check_verify_expected_token": check}

    ring_cap = int(ctx.ring.shape[0])
    return Recipe(Op.VERIFY, build, context_outputs, ctx.write_index,
                  _order_sensitive(ctx.write_index, ring_cap, cap), "verify")


@st.composite
def write_recipes(draw: st.DrawFn) -> Recipe:
    ctx = draw(contexts())
    n = ctx.num_slots
    ntok = draw(st.integers(0, 6))
    cap = draw(st.integers(0, 3))
    ids = i64s(draw, ntok, st.integers(0, 9))
    poss = i64s(draw, ntok, st.integers(0, 9))
    locs = [draw(st.one_of(_slots(n), st.just(-1))) for _ in range(ntok)]
    offsets = i64s(draw, cap + 1, st.integers(-1, ntok + 1))
    seeds = [draw(_slots(n)) for _ in range(cap)]
    nvr = draw(st.one_of(st.integers(0, cap + 1), st.sampled_from(I32_EXTREMES)))
    assert_on = draw(st.booleans())
    etok = i64s(draw, ntok, st.integers(0, 9))
    epos = i64s(draw, ntok, st.integers(0, 9))

    def build(g: Guarded) -> Kwargs:
        plan = WritePlan(write_offsets=g("write_offsets", offsets), write_seed_slot_indices=g("seeds", seeds),
                         write_num_valid_reqs=g("write_num_valid_reqs", [nvr], torch.int32))
        return {"context": ctx.build(g), "plan": plan, "input_ids": g("input_ids", ids),
                "positions": g("positions", poss), "out_cache_loc": g("out_cache_loc", locs),
                "enable_write_input_assert": assert_on,
                "expected_input_tokens": g("expected_input_tokens", etok) if assert_on else None,
                "expected_input_positions": g("expected_input_positions", epos) if assert_on else None}

    ring_cap = int(ctx.ring.shape[0])
    return Recipe(Op.WRITE, build, context_outputs, ctx.write_index,
                  _order_sensitive(ctx.write_index, ring_cap, 4 * ntok + cap), "write")


# -- plans ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanDraw:
    """A batch and its tables, drawn on the CPU (for the fused plan and its two stages)."""

    rpi: list[int]
    prefix: list[int]
    extend: list[int]
    r2t: torch.Tensor  # int32 [rows, cols]
    swa: int
    lut: list[int] | None
    pool: torch.Tensor | None  # int32 [rows, cols]
    valid: list[int] | None
    offset: int
    cap: int
    wcap: int
    init: list[int]  # starting values of every output (garbage the launch must leave or overwrite exactly)
    scratch: bool

    @property
    def bs(self) -> int:
        return len(self.rpi)

    def inputs(self, g: Guarded) -> Kwargs:
        return {"req_pool_indices": g("req_pool_indices", self.rpi), "prefix_lens": g("prefix_lens", self.prefix),
                "req_to_token": g("req_to_token", self.r2t, torch.int32),
                "full_to_swa_index_mapping": None if self.lut is None else g("lut", self.lut),
                "swa_window_size": self.swa}

    def pool_inputs(self, g: Guarded) -> Kwargs:
        return {"req_to_verify_expected_tokens": None if self.pool is None else g("pool", self.pool, torch.int32),
                "req_to_verify_expected_tokens_valid_lens": None if self.valid is None else g("valid", self.valid),
                "kv_token_id_vs_position_offset": self.offset}

    def verify_plan(self, g: Guarded) -> VerifyPlan:
        c = self.cap
        v = self.init
        return VerifyPlan(
            verify_slot_indices=g("verify_slot_indices", v[:c]), verify_expected_tokens=g("verify_expected_tokens",
                                                                                        v[c : 2 * c]),
            verify_expected_positions=g("verify_expected_positions", v[2 * c : 3 * c]),
            verify_prev_slot_indices=g("verify_prev_slot_indices", v[3 * c : 4 * c]),
            verify_num_valid=g("verify_num_valid", [77], torch.int32), enable=g("enable", [5], torch.int32),
            verify_offsets_scratch=g("scratch", [3] * PLAN_OFFSETS_SCRATCH_LEN) if self.scratch else None)

    def write_plan(self, g: Guarded) -> WritePlan:
        w = self.wcap
        return WritePlan(write_offsets=g("write_offsets", self.init[: w + 1]),
                         write_seed_slot_indices=g("seeds", self.init[w + 1 : 2 * w + 1]),
                         write_num_valid_reqs=g("write_num_valid_reqs", [99], torch.int32))


@st.composite
def plan_draws(draw: st.DrawFn) -> PlanDraw:
    bs = draw(st.integers(0, 4))
    rows, cols = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    r2t_vals = [draw(st.one_of(st.integers(-2, 12), st.sampled_from(I32_EXTREMES))) for _ in range(rows * cols)]
    r2t = torch.tensor(r2t_vals, dtype=torch.int32).view(rows, cols)
    rpi = [draw(st.one_of(st.integers(0, rows - 1), st.sampled_from((rows, -1, I64_MIN, I64_MAX)))) for _ in range(bs)]
    prefix = i64s(draw, bs, st.integers(0, cols + 2))
    extend = i64s(draw, bs, st.integers(-1, 4))
    swa = draw(st.sampled_from([0, 0, 1, 2, 5, 2**62, I64_MAX]))
    lut = None
    if swa > 0 or draw(st.booleans()):
        lut = i64s(draw, draw(st.integers(1, 8)), st.integers(-3, 12))
    pool = valid = None
    if draw(st.booleans()):
        prow, pcol = draw(st.integers(1, 4)), draw(st.integers(1, 6))
        pool = torch.tensor([draw(st.integers(-5, 50)) for _ in range(prow * pcol)], dtype=torch.int32).view(prow, pcol)
        valid = i64s(draw, bs, st.integers(-1, pcol + 2))
    cap = draw(st.integers(0, 8))
    wcap = bs + draw(st.integers(0, 2))
    init = [draw(st.integers(-9, 99)) for _ in range(4 * cap + 2 * wcap + 1)]
    return PlanDraw(rpi, prefix, extend, r2t, swa, lut, pool, valid,
                    draw(st.sampled_from([0, 0, 1, -1, I64_MAX, I64_MIN])), cap, wcap,
                    init + [0] * max(0, 2 * wcap + 1 - len(init)), draw(st.booleans()))


def _plan_outputs(kw: Kwargs) -> Outputs:
    vp: VerifyPlan = kw["verify_plan_out"]
    wp: WritePlan = kw["write_plan_out"]
    out = {f"verify_plan_out.{k}": getattr(vp, k) for k in
           ("verify_slot_indices", "verify_expected_tokens", "verify_expected_positions", "verify_prev_slot_indices",
            "verify_num_valid", "enable")}
    if vp.verify_offsets_scratch is not None:
        out["verify_plan_out.verify_offsets_scratch"] = vp.verify_offsets_scratch
    out.update({f"write_plan_out.{k}": getattr(wp, k) for k in
                ("write_offsets", "write_seed_slot_indices", "write_num_valid_reqs")})
    return out


@st.composite
def plan_recipes(draw: st.DrawFn) -> Recipe:
    p = draw(plan_draws())

    def build(g: Guarded) -> Kwargs:
        vp = p.verify_plan(g)
        return {"verify_plan_out": vp, "write_plan_out": p.write_plan(g), **p.inputs(g),
                "extend_seq_lens": g("extend_seq_lens", p.extend), "verify_capacity": p.cap, **p.pool_inputs(g)}

    return Recipe(Op.PLAN, build, _plan_outputs, label="plan", detail=repr(p))


_OFFSETS_OUT = ("out_verify_offsets_scratch", "out_write_offsets", "out_write_seed_slot_indices",
                "out_verify_num_valid", "out_verify_enable", "out_write_num_valid_reqs")
_ENTRIES_OUT = ("out_verify_slot_indices", "out_verify_expected_tokens", "out_verify_expected_positions",
                "out_verify_prev_slot_indices")


@st.composite
def plan_offsets_recipes(draw: st.DrawFn) -> Recipe:
    p = draw(plan_draws())
    capacity = draw(st.one_of(st.integers(0, 8), st.sampled_from([2**31, 2**62, I64_MAX])))
    fill = draw(st.integers(-9, 99))

    def build(g: Guarded) -> Kwargs:
        vp, wp = p.verify_plan(g), p.write_plan(g)
        kw = p.inputs(g)
        kw.pop("swa_window_size")
        return {**kw, "extend_seq_lens": g("extend_seq_lens", p.extend),
                "out_verify_offsets_scratch": g("out_verify_offsets_scratch", [fill] * PLAN_OFFSETS_SCRATCH_LEN),
                "out_write_offsets": wp.write_offsets, "out_write_seed_slot_indices": wp.write_seed_slot_indices,
                "out_verify_num_valid": vp.verify_num_valid, "out_verify_enable": vp.enable,
                "out_write_num_valid_reqs": wp.write_num_valid_reqs, "swa_window_size": p.swa,
                "verify_capacity": capacity}

    return Recipe(Op.PLAN_OFFSETS, build, lambda kw: {k: kw[k] for k in _OFFSETS_OUT}, label="plan_offsets",
                  detail=f"{p!r}, verify_capacity={capacity}")


@st.composite
def plan_entries_recipes(draw: st.DrawFn) -> Recipe:
    """Stage 2 from a hostile scratch: offsets anywhere (unsorted, negative, past the capacity, extreme)."""
    p = draw(plan_draws())
    head = i64s(draw, p.bs + 1, st.integers(-2, p.cap + 3))
    enable = draw(st.sampled_from([0, 1, 1, 2, -1]))

    def build(g: Guarded) -> Kwargs:
        vp = p.verify_plan(g)
        scratch = head + [7] * (PLAN_OFFSETS_SCRATCH_LEN - len(head))
        return {**p.inputs(g), **p.pool_inputs(g), "verify_offsets_scratch": g("verify_offsets_scratch", scratch),
                "verify_enable": g("verify_enable", [enable], torch.int32),
                "out_verify_slot_indices": vp.verify_slot_indices,
                "out_verify_expected_tokens": vp.verify_expected_tokens,
                "out_verify_expected_positions": vp.verify_expected_positions,
                "out_verify_prev_slot_indices": vp.verify_prev_slot_indices}

    return Recipe(Op.PLAN_ENTRIES, build, lambda kw: {k: kw[k] for k in _ENTRIES_OUT}, label="plan_entries",
                  detail=f"{p!r}, scratch head {head}, enable {enable}")


@st.composite
def scatter_recipes(draw: st.DrawFn) -> Recipe:
    bs = draw(st.integers(0, 4))
    rows, cols = draw(st.integers(1, 3)), draw(st.integers(1, 5))
    ntok = draw(st.integers(0, 8))
    flat = i64s(draw, ntok, st.integers(-5, 50))
    offsets = i64s(draw, bs + 1, st.integers(-2, ntok + 2))
    rpi = [draw(st.one_of(st.integers(0, rows - 1), st.sampled_from((rows, -1, I64_MIN, I64_MAX)))) for _ in range(bs)]
    pool = [draw(st.integers(-50, 50)) for _ in range(rows * cols)]

    def build(g: Guarded) -> Kwargs:
        return {"flat_in": g("flat_in", flat), "offsets": g("offsets", offsets),
                "req_pool_indices": g("req_pool_indices", rpi),
                "pool_out": g("pool_out", pool, torch.int32, (rows, cols))}

    return Recipe(Op.SCATTER, build, lambda kw: {"pool_out": kw["pool_out"]}, label="scatter",
                  detail=f"offsets {offsets}, rows {rpi}, pool {rows}x{cols}, {ntok} tokens")


RECIPES: dict[Op, Callable[[], st.SearchStrategy[Recipe]]] = {
    Op.VERIFY: verify_recipes,
    Op.WRITE: write_recipes,
    Op.PLAN: plan_recipes,
    Op.PLAN_OFFSETS: plan_offsets_recipes,
    Op.PLAN_ENTRIES: plan_entries_recipes,
    Op.SCATTER: scatter_recipes,
}
"""One hostile-launch strategy per operation."""

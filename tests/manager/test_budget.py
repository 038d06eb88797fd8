"""The verification budget: its bound per launch, its period guarantee on a changing live set, and detection."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from kvcanary.consts import FailReason, RealKvHashMode
from kvcanary.launch.budget import launch_verify_budget_kernel
from kvcanary.launch.plan import launch_canary_plan_kernels
from kvcanary.manager import CanaryCapacities, CanaryConfig, VerifyBudget
from kvcanary.manager.budget import BudgetFilter
from kvcanary.manager.graphs import STAGED_AFTER
from kvcanary.ops.budget import valid_call
from kvcanary.plans import VerifyPlan, WritePlan
from tests.manager.graph_parity import pad_eagerly
from tests.manager.world import Req, World, make_world

Entry = tuple[int, int, int, int]  # slot, expected token, expected position, predecessor slot


def plan_entries(plan: VerifyPlan) -> list[Entry]:
    n = int(plan.verify_num_valid[0])
    cols = [t[:n].tolist() for t in (plan.verify_slot_indices, plan.verify_expected_tokens,
                                     plan.verify_expected_positions, plan.verify_prev_slot_indices)]
    return list(zip(*cols, strict=True))


def test_budget_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="max_entries must be a positive int"):
        VerifyBudget(max_entries=0)
    with pytest.raises(ValueError, match="newest_per_request must be a non-negative int"):
        VerifyBudget(max_entries=8, newest_per_request=-1)
    with pytest.raises(TypeError, match="verify_budget must be a VerifyBudget"):
        CanaryConfig(verify_budget=64)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot keep up"):
        VerifyBudget(max_entries=8, newest_per_request=2).period(batch_size=2, max_verify_len=100, slide=2)


def test_stride_and_period() -> None:
    b = VerifyBudget(max_entries=64, newest_per_request=2)
    assert b.stride(4) == 14 and b.entries_bound(4) == 64
    assert b.period(batch_size=4, max_verify_len=30) == 3  # 28 older entries, 14 a step, +1
    assert b.stride(100) == 1  # never zero: the bound then exceeds max_entries, and says so
    assert b.entries_bound(100) == 300


class Workload:
    """Requests over ``rows`` request rows with distinct slots per (row, position), arriving, growing by a
    prefill chunk or one decode token a step, and finishing; the full plan built by the plan launcher."""

    def __init__(self, seed: int, rows: int = 8, max_len: int = 96) -> None:
        self.rng = random.Random(seed)
        self.rows, self.max_len = rows, max_len
        self.r2t = (torch.arange(rows * max_len, dtype=torch.int32).reshape(rows, max_len) + 1)
        self.lens: dict[int, int] = {}  # row -> tokens written so far
        self.gen: dict[int, int] = {}  # row -> request generation (a recycled row is a new request)
        self.cap = rows * max_len
        self.vp = VerifyPlan.allocate(verify_capacity=self.cap, device="cpu")
        self.wp = WritePlan.allocate(write_req_capacity=rows, device="cpu")

    def step(self) -> tuple[list[int], list[int], list[int]]:
        """Pick this step's batch: (rows, prefix lengths, extend lengths)."""
        for row in [r for r, n in self.lens.items() if n >= self.max_len - 8 or self.rng.random() < 0.03]:
            del self.lens[row]
        for row in range(1, self.rows):
            if row not in self.lens and self.rng.random() < 0.3:
                self.lens[row] = 0
                self.gen[row] = self.gen.get(row, 0) + 1
        rows = sorted(self.lens)
        pre = [self.lens[r] for r in rows]
        ext = [self.rng.randint(4, 12) if self.lens[r] == 0 else 1 for r in rows]
        for r, e in zip(rows, ext, strict=True):
            self.lens[r] += e
        return rows, pre, ext

    def plan(self, rows: list[int], pre: list[int], ext: list[int]) -> None:
        def t(x: list[int]) -> torch.Tensor:
            return torch.tensor(x, dtype=torch.int64)

        launch_canary_plan_kernels(
            verify_plan_out=self.vp, write_plan_out=self.wp, req_pool_indices=t(rows), prefix_lens=t(pre),
            extend_seq_lens=t(ext), req_to_token=self.r2t, swa_window_size=0, full_to_swa_index_mapping=None,
            verify_capacity=self.cap, req_to_verify_expected_tokens=None,
            req_to_verify_expected_tokens_valid_lens=None, kv_token_id_vs_position_offset=0, backend="torch_ref")


@pytest.mark.parametrize("seed", [random.randrange(1 << 30) for _ in range(2)])
def test_every_live_entry_is_verified_within_the_period(seed: int) -> None:
    budget = VerifyBudget(max_entries=80, newest_per_request=2)
    w = Workload(seed)
    flt = BudgetFilter(budget, num_rows=w.rows, device=torch.device("cpu"))
    # the bound: the largest batch the workload makes and its longest request
    period = budget.period(batch_size=w.rows - 1, max_verify_len=w.max_len)
    waiting: dict[tuple[int, int, int], int] = {}  # (row, generation, position) -> steps since last verified
    checked = 0
    for step in range(150):
        rows, pre, ext = w.step()
        if not rows:
            continue
        w.plan(rows, pre, ext)
        full = plan_entries(w.vp)
        got = plan_entries(flt.apply(w.vp, batch_size=len(rows), req_pool_indices=torch.tensor(rows)))
        assert len(got) <= min(budget.entries_bound(len(rows)), budget.max_entries), step
        assert set(got) <= set(full), f"step {step}: the budget made entries the plan did not have"
        verified = {e[0] for e in got}
        live = set()
        for r, p in zip(rows, pre, strict=True):
            for pos in range(p):
                key = (r, w.gen[r], pos)
                live.add(key)
                slot = int(w.r2t[r, pos])
                if slot in verified:
                    waiting[key] = 0
                    checked += 1
                else:
                    waiting[key] = waiting.get(key, 0) + 1
                    assert waiting[key] < period, f"step {step}: row {r} position {pos} unverified for {period}"
            for pos in range(max(p - budget.newest_per_request, 0), p):  # the newest are always verified
                assert int(w.r2t[r, pos]) in verified, (step, r, pos)
        waiting = {k: v for k, v in waiting.items() if k in live}
    assert checked > 1000  # the workload really exercised the filter


def test_a_flip_is_caught_within_the_period_under_a_budget() -> None:
    budget = VerifyBudget(max_entries=8, newest_per_request=1)
    w = make_world(mode=RealKvHashMode.ALL, config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL,
                                                                verify_budget=budget))
    a = Req(1, list(range(100, 130)), list(range(1, 21)))
    w.forward([(a, 0, 20)])
    w.step()
    w.k[2, 0, 0] += 1.0  # an old slot, far from the newest
    period = budget.period(batch_size=1, max_verify_len=26)
    caught_at = None
    for n in range(6):
        a.slots.append(30 + n)
        w.forward([(a, 20 + n, 1)])
        w.step()
        if caught_at is None and any(slot == 2 for _, slot, _ in w.events()):
            caught_at = n + 1
    assert caught_at is not None and caught_at <= period, (caught_at, period)
    ev = w.events()
    assert all(slot == 2 and bits == int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH) for _, slot, bits in ev), ev


def test_a_batch_too_large_for_max_entries_keeps_every_request() -> None:
    """Three decoding requests under max_entries=4, newest=1: a step keeps 6 entries (entries_bound), not 4,
    so the last request in batch order is verified too and a flip in its newest prefix slot is caught."""
    w = make_world(config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL,
                                       verify_budget=VerifyBudget(max_entries=4, newest_per_request=1)))
    a, b, c = (Req(i + 1, list(range(100 * (i + 1), 100 * (i + 1) + 40)), list(range(1 + 5 * i, 6 + 5 * i)))
               for i in range(3))
    w.forward([(a, 0, 5), (b, 0, 5), (c, 0, 5)])
    w.step()
    w.k[c.slots[-1], 0, 0] += 1.0
    for n in range(3):
        for r, base in ((a, 16), (b, 30), (c, 44)):
            r.slots.append(base + n)
        w.forward([(a, 5 + n, 1), (b, 5 + n, 1), (c, 5 + n, 1)])
        w.step()
    assert {slot for _, slot, bits in w.events() if bits & int(FailReason.VERIFY_REAL_KV_HASH_MISMATCH)} == {
        c.slots[4]}


def test_an_empty_forward_under_a_budget_verifies_nothing() -> None:
    w = make_world(config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL, verify_budget=VerifyBudget(max_entries=16)))
    a = Req(1, list(range(100, 112)), list(range(1, 9)))
    w.forward([(a, 0, 8)])
    w.step()
    w.forward([])  # bs = 0: the engine had nothing to run this step
    w.step()
    assert w.events() == []


def _reference_apply(full: VerifyPlan, *, batch_size: int, rows: torch.Tensor, cursor: torch.Tensor, newest: int,
                     stride: int, step: torch.Tensor | int, cap_out: int) -> tuple[list[Entry], list[int]]:
    """The budget's definition, entry by entry over the whole full plan: entry ``j`` of a request of ``count``
    entries and ``M = max(count - newest, 1)`` older ones is kept when it is one of the newest, or when
    ``(j - first) mod M < stride``, ``first = (cursor - base) mod M`` and ``base`` the request's first entry's
    position (0 past the plan's count); kept entries stay in plan order, at most ``cap_out``; each cursor then
    moves to ``base + (first + step) mod M`` (no move when the plan overflowed, enable 0), but a request of no
    entries leaves it. Returns the kept entries and the cursors after."""
    off = full.verify_offsets_scratch
    assert off is not None
    n = int(full.verify_num_valid[0])
    cols = [t.tolist() for t in (full.verify_slot_indices, full.verify_expected_tokens,
                                 full.verify_expected_positions, full.verify_prev_slot_indices)]
    cur = cursor.clone()
    kept: list[Entry] = []
    moved = cursor.clone()
    for b in range(batch_size):
        start, count = int(off[b]), max(int(off[b + 1]) - int(off[b]), 0)
        older = max(count - newest, 1)
        row = min(max(int(rows[b]), 0), cursor.numel() - 1)
        base = cols[2][start] if 0 <= start < min(n, len(cols[2])) else 0
        first = (int(cur[row]) - base) % older
        for j in range(count):
            i = start + j
            if i < n and (j >= count - newest or (j - first) % older < stride):
                kept.append((cols[0][i], cols[1][i], cols[2][i], cols[3][i]))
        if count > 0:  # a request of no entries (padding, a first chunk) leaves its row's cursor
            moved[row] = base + (first + int(step) * int(full.enable[0])) % older
    return kept[:cap_out], moved.tolist()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_filter_keeps_exactly_the_budgets_entries(seed: int) -> None:
    """Byte for byte what the budget defines, over requests of no entries, of only newest ones, of fewer older
    ones than the stride and of many, with cursors past a request's end (its older entries shrank) and random
    first positions (the cursor is a token position), a full plan cut short (overflow: no cursor moves), more
    kept entries than the filter holds, rows repeated (padding) and the cursor held back (layer rotation)."""
    rng = random.Random(seed)
    budget = VerifyBudget(max_entries=rng.choice([6, 24, 60]), newest_per_request=rng.choice([0, 1, 2, 3]))
    cap_in, num_rows = 400, 12
    flt = BudgetFilter(budget, num_rows=num_rows, device=torch.device("cpu"), max_batch=8)
    flt.cursor.copy_(torch.tensor([rng.randrange(0, 90) for _ in range(num_rows)]))
    full = VerifyPlan.allocate(verify_capacity=cap_in, device="cpu")
    for t in (full.verify_slot_indices, full.verify_expected_tokens, full.verify_expected_positions,
              full.verify_prev_slot_indices):
        t.copy_(torch.randint(-5, 1 << 40, (cap_in,)))
    for trial in range(40):
        bs = rng.randint(1, 8)
        counts = [rng.choice([0, 1, 2, 3, 5, 9, rng.randint(10, 60)]) for _ in range(bs)]
        off = [0]
        for c in counts:
            off.append(off[-1] + c)
        assert full.verify_offsets_scratch is not None
        full.verify_offsets_scratch[: bs + 1] = torch.tensor(off)
        full.verify_num_valid[0] = min(off[-1], cap_in, rng.choice([off[-1], rng.randint(0, max(off[-1], 1))]))
        full.enable[0] = int(int(full.verify_num_valid[0]) == off[-1])  # cut short: the plan overflowed
        rows = torch.tensor([rng.randrange(0, num_rows + 2) for _ in range(bs)])  # past the end: clamped
        stride = rng.choice([None, 1, 3])
        advance = rng.choice([None, torch.tensor(0), torch.tensor(1)])
        s = budget.stride(bs) if stride is None else stride
        want, cursors = _reference_apply(full, batch_size=bs, rows=rows, cursor=flt.cursor, newest=budget.newest_per_request,
                                         stride=s, step=s if advance is None else int(advance) * s, cap_out=flt.capacity)
        got = plan_entries(flt.apply(full, batch_size=bs, req_pool_indices=rows, advance=advance, stride=stride))
        assert got == want, (seed, trial, counts)
        if len(set(rows.clamp(0, num_rows - 1).tolist())) == bs:  # a repeated row's cursor: either write may win
            assert flt.cursor.tolist() == cursors, (seed, trial)
        else:
            flt.cursor.copy_(torch.tensor(cursors))



@pytest.mark.parametrize("seed", [0, 1, 2])
def test_with_rounds_a_row_moves_in_every_rounds_th_forward_of_its_own(seed: int) -> None:
    """``rounds`` (layer rotation's G): a row's cursor moves, as without rounds, in every G-th forward in which
    its request has entries, counted per row, and stays in the others; the kept entries are those without rounds
    at the same cursors. Random batches of random rows (a row absent, present with no entries, present with
    some), padding rows naming a real request's row (their no-entry rows never undo its move)."""
    rng = random.Random(seed)
    budget = VerifyBudget(max_entries=24, newest_per_request=rng.choice([0, 1, 2]))
    g, num_rows, cap_in = rng.choice([2, 3]), 6, 400
    held = BudgetFilter(budget, num_rows=num_rows, device=torch.device("cpu"), max_batch=8)
    free = BudgetFilter(budget, num_rows=num_rows, device=torch.device("cpu"), max_batch=8)
    held.cursor.copy_(torch.tensor([rng.randrange(0, 90) for _ in range(num_rows)]))
    full = VerifyPlan.allocate(verify_capacity=cap_in, device="cpu")
    for t in (full.verify_slot_indices, full.verify_expected_tokens, full.verify_expected_positions,
              full.verify_prev_slot_indices):
        t.copy_(torch.randint(0, 1 << 20, (cap_in,)))
    seen = [0] * num_rows
    moves_seen = 0
    for trial in range(60):
        rows_l = rng.sample(range(num_rows), rng.randint(1, 4))
        counts = [rng.choice([0, 3, 9, rng.randint(10, 40)]) for _ in rows_l]
        rows_l += [0] * rng.randint(0, 2)  # padding rows: row 0, no entries
        counts += [0] * (len(rows_l) - len(counts))
        bs = len(rows_l)
        off = [0]
        for c in counts:
            off.append(off[-1] + c)
        assert full.verify_offsets_scratch is not None
        full.verify_offsets_scratch[: bs + 1] = torch.tensor(off)
        full.verify_num_valid[0] = off[-1]
        rows = torch.tensor(rows_l)
        before = held.cursor.tolist()
        free.cursor.copy_(held.cursor)
        want = plan_entries(free.apply(full, batch_size=bs, req_pool_indices=rows))
        got = plan_entries(held.apply(full, batch_size=bs, req_pool_indices=rows, rounds=g))
        assert got == want, (seed, trial)
        expect = list(before)
        for r, c in zip(rows_l, counts, strict=True):
            if c > 0:
                if seen[r] % g == g - 1:
                    expect[r] = int(free.cursor[r])
                    moves_seen += expect[r] != before[r]
                seen[r] += 1
        assert held.cursor.tolist() == expect, (seed, trial, rows_l, counts)
        assert held.seen.tolist() == seen
    assert moves_seen > 5  # the rows did move (a test that holds every cursor would pass the rest)

OVERFLOW_CAPS = CanaryCapacities(verify_capacity=4, write_req_capacity=8, write_token_capacity=32, sweep_capacity=8,
                                 expected_token_capacity=64)
OVERFLOW_SCHEDULE: list[tuple[list[tuple[int, int, int]], int]] = [
    ([(0, 0, 3), (1, 0, 1)], 0), ([(0, 3, 1), (1, 1, 1)], 0), ([(0, 4, 1)], 0), ([(0, 5, 1), (1, 2, 1)], 1),
    ([], 0), ([(0, 6, 1), (1, 3, 1)], 1), ([(0, 7, 1)], 1)]
"""One forward a step as (request, prefix, extend) rows, and how many of its plans overflow the verify capacity
of 4: prefills of 3 and 1 tokens (no prefix), then decodes of 4 prefix entries (fits), 5 + 2, an empty forward,
6 + 3 and 7 (past the capacity); odd forwards with a padding row."""
OVERFLOW_BUDGET = VerifyBudget(max_entries=3, newest_per_request=1)


def run_overflow_schedule(w: World, *, keep: bool = False) -> tuple[list[int], list[int]]:
    """:data:`OVERFLOW_SCHEDULE` through ``w``'s manager: the device counter after each forward and each step's
    stats. ``keep``: the engine hands each non-empty batch again, so it replays a kept batch's staged HEAD."""
    reqs = (Req(1, list(range(100, 120)), list(range(1, 4))), Req(2, list(range(200, 220)), [9]))
    seen: list[int] = []
    stats: list[int] = []
    for n, (rows, _) in enumerate(OVERFLOW_SCHEDULE):
        batch = [(reqs[ri], p, e) for ri, p, e in rows]
        for r, p, e in batch:
            while len(r.slots) < p + e:
                r.slots.append(20 * r.row + len(r.slots))
        if keep and batch:
            built = w.build(batch, pad_rows=n % 2)
            for _ in range(STAGED_AFTER + 2):  # the engine hands the very batch again
                with w.manager.forward(built):
                    w.write_kv(built.out_cache_loc.tolist())
                seen.append(int(w.manager.state.skipped_verifies[0]))
        else:
            w.forward(batch, pad_rows=n % 2 if batch else 0)
            seen.append(int(w.manager.state.skipped_verifies[0]))
        stats.append(w.manager.end_step().skipped_verifies)
    return seen, stats


@pytest.mark.parametrize("padded", [False, True], ids=["eager", "bucketed"])
def test_an_overflowing_plan_is_counted_once_per_forward_as_without_a_budget(padded: bool) -> None:
    """Under a budget, each forward whose full plan overflows counts one skipped verify, in the filter's launch,
    exactly as the budget-less manager counts it: the device counter after every forward, each step's stats and
    the read-back snapshot agree, an empty forward counts nothing. ``bucketed``: the forwards run the padded
    launches the manager's graphs capture (uncaptured on the CPU)."""
    want = list(itertools.accumulate(o for _, o in OVERFLOW_SCHEDULE))
    worlds = {name: make_world(capacities=OVERFLOW_CAPS, config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL,
                                                                               verify_budget=b))
              for name, b in (("none", None), ("budget", OVERFLOW_BUDGET))}
    graphs = [g for w in worlds.values() for g in pad_eagerly(w.manager)] if padded else []
    runs = {name: run_overflow_schedule(w) for name, w in worlds.items()}
    for name, (seen, _) in runs.items():
        assert seen == want, name
    assert runs["budget"][1] == runs["none"][1]
    assert all(g.padded_eager > 0 for g in graphs), "the bucketed path never ran"
    for w in worlds.values():
        assert w.manager.flush() == []
        snap = w.manager.last_snapshot
        assert snap is not None and snap.skipped_verifies == want[-1] == 3
        assert w.manager.end_step().skipped_verifies == want[-1]


@pytest.mark.parametrize("path", ["kept", "swa"])
def test_budget_counts_as_budgetless(path: str) -> None:
    """Kept batches (their staged HEAD replayed) and a sliding-window group count alike with and without a
    budget (both count at HEAD)."""
    got = {}
    for name, b in (("none", None), ("budget", OVERFLOW_BUDGET)):
        cfg = CanaryConfig(real_kv_mode=RealKvHashMode.ALL, verify_budget=b)
        w = make_world(capacities=OVERFLOW_CAPS, config=cfg, swa_window=3 if path == "swa" else 0)
        if path == "kept":
            pad_eagerly(w.manager)
        got[name] = run_overflow_schedule(w, keep=path == "kept")[0]
    assert got["budget"] == got["none"]
    assert got["none"][-1] > 0


def test_compiled_budget_counts_as_budgetless() -> None:
    torch._dynamo.reset()
    got = {}
    for name, b, comp in (("none", None, False), ("budget", OVERFLOW_BUDGET, True)):
        cfg = CanaryConfig(real_kv_mode=RealKvHashMode.ALL, verify_budget=b, compile=comp)
        got[name] = run_overflow_schedule(make_world(capacities=OVERFLOW_CAPS, config=cfg))[0]
    assert got["budget"] == got["none"]
    assert got["none"][-1] > 0


def test_a_forward_whose_model_raises_counts_alike() -> None:
    """``with manager.forward(batch): model(...)`` where the model raises: HEAD ran, TAIL never does. The two
    managers should agree on the overflow count (both count the overflowed HEAD, or neither)."""
    got = {}
    for name, b in (("none", None), ("budget", OVERFLOW_BUDGET)):
        w = make_world(capacities=OVERFLOW_CAPS, config=CanaryConfig(real_kv_mode=RealKvHashMode.ALL, verify_budget=b))
        run_overflow_schedule(w)  # ends with 3 overflowed forwards
        a = Req(1, list(range(100, 120)), list(range(1, 9)))
        batch = w.build([(a, 7, 1)])
        with pytest.raises(RuntimeError, match="model failed"), w.manager.forward(batch):
            raise RuntimeError("model failed")
        got[name] = int(w.manager.state.skipped_verifies[0])
    assert got["budget"] == got["none"], got


@pytest.mark.parametrize(("bad", "rule"), [
    (torch.zeros(1, dtype=torch.int32), "skipped_verifies must have dtype torch.int64, got torch.int32"),
    (torch.zeros(2, dtype=torch.int64), "skipped_verifies length must be 1, got 2"),
    (torch.zeros(1, 1, dtype=torch.int64), r"skipped_verifies must be 1-D, got shape \(1, 1\)"),
    (torch.zeros(1, dtype=torch.int64, device="meta"), "skipped_verifies must be on verify_slot_indices's device"),
])
def test_a_bad_overflow_counter_is_refused_by_name_and_nothing_is_written(bad: torch.Tensor, rule: str) -> None:
    kw = valid_call()
    gen = torch.Generator().manual_seed(3)
    for t in kw.values():
        if isinstance(t, torch.Tensor):
            t.copy_(torch.randint(0, 9, t.shape, generator=gen, dtype=torch.int64))
    before = {k: v.clone() for k, v in kw.items() if isinstance(v, torch.Tensor)}
    kw["skipped_verifies"] = bad
    with pytest.raises(ValueError, match=rule):
        launch_verify_budget_kernel(**kw, backend="torch_ref")
    assert all(torch.equal(kw[k], v) for k, v in before.items())
    if bad.device.type == "cpu":
        assert not bad.any()

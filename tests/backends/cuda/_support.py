"""Parity checks shared by the GPU tests and the host-emulation tests of the cuda backend.

Everything compares a backend's outputs with ``torch_ref`` on the CPU (the specification), violation rows as
a multiset (a parallel kernel appends them in any order). Write launches whose result torch_ref leaves
unspecified are detected and relaxed: a slot written twice in one launch (its record is excluded) and a
seed written by the same launch (the call is skipped).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.registry import Op
from kvcanary.testing import golden as g
from kvcanary.testing.parity import compare_outputs, launcher, ring_rows, run_call
from kvcanary.testing.scenarios import GENERATORS, Call, plan_call

__all__ = ["Call"]

Runner = Callable[..., dict[str, torch.Tensor]]
RUNNERS: dict[str, Runner] = {
    "verify_cases": g.run_verify, "write_cases": g.run_write, "plan_cases": g.run_plan, "scatter_cases": g.run_scatter,
}
QUIRKS_KEPT = ("write_quirk_num_valid_reqs_beyond_bs_writes_nothing", "verify_quirk_negative_num_valid_is_noop")


def golden_cases() -> list[tuple[str, g.Case]]:
    """Every main golden case, plus the reference quirks kvcanary keeps."""
    out = [(f, c) for f in RUNNERS for c in g.load(f)]
    for f in ("write_errors_and_quirks", "verify_errors_and_quirks"):
        out += [(f, c) for c in g.load(f) if c.name in QUIRKS_KEPT]
    return out


def error_cases() -> list[g.Case]:
    return [c for f in ("plan_errors_and_quirks", "write_errors_and_quirks", "verify_errors_and_quirks")
            for c in g.load(f) if "error" in c.outputs and "_error_" in c.name]


def _base(case: g.Case) -> int | None:
    if case.kind in ("verify", "write"):
        return int(case.inputs["context"]["violation_write_index"]["data"][0])
    return None


def check_golden(case: g.Case, device: torch.device | str, backend: str) -> list[str]:
    run = {"verify": g.run_verify, "write": g.run_write, "plan": g.run_plan, "scatter": g.run_scatter}[case.kind]
    got = {k: v.detach().cpu() for k, v in run(case, device, backend).items()}
    problems = compare_outputs(got, g.expected(case), base=_base(case), order_sensitive=case.ring_order_sensitive)
    if case.kind == "verify" and not torch.equal(got["canary_buf"], g.req(case.inputs["context"]["canary_buf"])):
        problems.append("verify changed canary_buf")
    return problems


def compare_steps(got: list[dict[str, torch.Tensor]], want: list[dict[str, torch.Tensor]],
                  ring: str = "violation_ring", index: str = "violation_write_index") -> list[str]:
    """Differences over a run of steps sharing one ring: every tensor but the ring exactly; the ring's rows of
    each step as a multiset (their order within and across the launches of a step is not fixed), rows of
    earlier steps untouched, and the write index exact. Where a step overflowed the ring part-way, which of
    its rows were kept depends on their order: only its index is compared."""
    problems: list[str] = []
    prev: torch.Tensor | None = None
    base = 0
    for step, (gs, ws) in enumerate(zip(got, want, strict=True)):
        g_ring, w_ring = gs[ring].detach().cpu(), ws[ring]
        cap = w_ring.shape[0]
        total = int(ws[index].reshape(-1)[0])
        rest = {k: v for k, v in ws.items() if k != ring}
        problems += [f"step {step}: {p}" for p in compare_outputs({k: v.detach().cpu() for k, v in gs.items()}, rest)]
        start, kept = min(base, cap), min(max(total, 0), cap)
        if prev is not None and not torch.equal(g_ring[:start], prev[:start]):
            problems.append(f"step {step}: ring rows of earlier steps changed")
        if not torch.equal(g_ring[kept:], w_ring[kept:]):
            problems.append(f"step {step}: ring rows past the write index changed")
        overflow = base < cap < total
        if not overflow and ring_rows(g_ring, start, kept) != ring_rows(w_ring, start, kept):
            problems.append(f"step {step}: this step's ring rows differ (as a multiset)")
        prev, base = g_ring, total
    return problems


def check_pipeline(case: g.Case, device: torch.device | str, backend: str) -> list[str]:
    """Every step's plans, counters, buffers and ring (see :func:`compare_steps`)."""
    return compare_steps(g.run_pipeline(case, device, backend), g.expected_pipeline(case))


# -- write launches the reference leaves unspecified ----------------------------------------------------------
def write_races(kw: dict[str, Any]) -> tuple[bool, set[int]]:
    """(a seed is written by the same launch, slots written more than once) under torch_ref's semantics."""
    ctx, plan = kw["context"], kw["plan"]
    assert isinstance(plan, WritePlan)
    cap = plan.write_seed_slot_indices.shape[0]
    nreq = min(max(int(plan.write_num_valid_reqs[0]), 0), cap)
    offsets = plan.write_offsets.cpu().tolist()
    if nreq == 0 or offsets[nreq] <= 0:
        return False, set()
    locs = kw["out_cache_loc"].cpu().tolist()
    seeds = plan.write_seed_slot_indices.cpu().tolist()
    ntok = len(locs)
    num_slots = ctx.canary_buf.shape[0]
    written: Counter[int] = Counter()
    used_seeds: list[int] = []
    for r in range(nreq):
        s, e = min(max(offsets[r], 0), ntok), min(max(offsets[r + 1], 0), ntok)
        if e <= s:
            continue
        written.update(x for x in locs[s:e] if 0 <= x < num_slots)
        if 0 <= seeds[r] < num_slots:
            used_seeds.append(seeds[r])
    return any(x in written for x in used_seeds), {x for x, n in written.items() if n > 1}


def check_call(call: Call, device: torch.device | str, backend: str) -> list[str] | None:
    """Differences between ``backend`` on ``device`` and torch_ref on the CPU; None when the call's outcome is
    unspecified (a seed written by the same write launch)."""
    dup: set[int] = set()
    if call.op == Op.WRITE:
        race, dup = write_races(call.make("cpu"))
        if race:
            return None
    want = run_call(call, "cpu", "torch_ref")
    got = run_call(call, device, backend)
    if dup:
        rows = torch.tensor(sorted(dup))
        got["canary_buf"][rows] = want["canary_buf"][rows]
    return compare_outputs(got, want, base=call.ring_base, order_sensitive=call.order_sensitive)


# -- calls of the two plan stages, derived from the fused plan's scenarios -------------------------------------
def plan_offsets_call(rng: random.Random, *, hostile: bool = False) -> Call:
    base = plan_call(rng, hostile=hostile)
    fill = rng.randint(-9, 99)

    def make(device: torch.device | str) -> dict[str, Any]:
        kw = base.make(device)
        vp: VerifyPlan = kw["verify_plan_out"]
        wp: WritePlan = kw["write_plan_out"]
        return {
            "req_pool_indices": kw["req_pool_indices"], "prefix_lens": kw["prefix_lens"],
            "extend_seq_lens": kw["extend_seq_lens"], "req_to_token": kw["req_to_token"],
            "full_to_swa_index_mapping": kw["full_to_swa_index_mapping"],
            "out_verify_offsets_scratch": torch.full((4097,), fill, dtype=torch.int64, device=device),
            "out_write_offsets": wp.write_offsets, "out_write_seed_slot_indices": wp.write_seed_slot_indices,
            "out_verify_num_valid": vp.verify_num_valid, "out_verify_enable": vp.enable,
            "out_write_num_valid_reqs": wp.write_num_valid_reqs, "swa_window_size": kw["swa_window_size"],
            "verify_capacity": kw["verify_capacity"],
        }

    names = ("out_verify_offsets_scratch", "out_write_offsets", "out_write_seed_slot_indices", "out_verify_num_valid",
             "out_verify_enable", "out_write_num_valid_reqs")
    return Call(Op.PLAN_OFFSETS, make, lambda kw: {k: kw[k] for k in names}, label="plan_offsets")


def plan_entries_call(rng: random.Random, *, hostile: bool = False) -> Call:
    """Stage 2 from the reference's own stage-1 offsets, or (hostile) from unsorted garbage offsets."""
    base = plan_call(rng, hostile=hostile)
    garbage = hostile and rng.random() < 0.5
    enable = rng.choice([1, 1, 1, 0, 2])
    seed = rng.getrandbits(32)

    def make(device: torch.device | str) -> dict[str, Any]:
        kw = base.make("cpu")
        vp: VerifyPlan = kw["verify_plan_out"]
        wp: WritePlan = kw["write_plan_out"]
        bs = kw["req_pool_indices"].shape[0]
        scratch = torch.full((4097,), 5, dtype=torch.int64)
        if garbage:
            gen = torch.Generator().manual_seed(seed)
            scratch[: bs + 1] = torch.randint(-4, vp.verify_capacity + 6, (bs + 1,), generator=gen)
        else:  # the reference's stage 1 fills the scratch
            launcher(Op.PLAN_OFFSETS)(
                req_pool_indices=kw["req_pool_indices"], prefix_lens=kw["prefix_lens"],
                extend_seq_lens=kw["extend_seq_lens"], req_to_token=kw["req_to_token"],
                full_to_swa_index_mapping=kw["full_to_swa_index_mapping"], out_verify_offsets_scratch=scratch,
                out_write_offsets=wp.write_offsets.clone(), out_write_seed_slot_indices=wp.write_seed_slot_indices.clone(),
                out_verify_num_valid=vp.verify_num_valid.clone(), out_verify_enable=vp.enable.clone(),
                out_write_num_valid_reqs=wp.write_num_valid_reqs.clone(), swa_window_size=kw["swa_window_size"],
                verify_capacity=kw["verify_capacity"], backend="torch_ref")

        def dev(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return {
            "req_pool_indices": dev(kw["req_pool_indices"]), "prefix_lens": dev(kw["prefix_lens"]),
            "req_to_token": dev(kw["req_to_token"]), "full_to_swa_index_mapping": dev(kw["full_to_swa_index_mapping"]),
            "verify_offsets_scratch": dev(scratch),
            "verify_enable": torch.tensor([enable], dtype=torch.int32, device=device),
            "req_to_verify_expected_tokens": dev(kw["req_to_verify_expected_tokens"]),
            "req_to_verify_expected_tokens_valid_lens": dev(kw["req_to_verify_expected_tokens_valid_lens"]),
            "out_verify_slot_indices": dev(vp.verify_slot_indices),
            "out_verify_expected_tokens": dev(vp.verify_expected_tokens),
            "out_verify_expected_positions": dev(vp.verify_expected_positions),
            "out_verify_prev_slot_indices": dev(vp.verify_prev_slot_indices),
            "kv_token_id_vs_position_offset": kw["kv_token_id_vs_position_offset"],
            "swa_window_size": kw["swa_window_size"],
        }

    names = ("out_verify_slot_indices", "out_verify_expected_tokens", "out_verify_expected_positions",
             "out_verify_prev_slot_indices")
    return Call(Op.PLAN_ENTRIES, make, lambda kw: {k: kw[k] for k in names}, label="plan_entries")


ALL_GENERATORS: dict[Op, Callable[..., Call]] = {
    **GENERATORS, Op.PLAN_OFFSETS: plan_offsets_call, Op.PLAN_ENTRIES: plan_entries_call,
}


def fuzz(op: Op, device: torch.device | str, backend: str, *, seed: int, count: int, hostile: bool) -> list[str]:
    """``count`` fresh scenarios of ``op``; one line per failing call (with what reproduces it)."""
    rng = random.Random(seed)
    failures: list[str] = []
    for i in range(count):
        extra: dict[str, Any] = {"max_tokens": rng.choice([24, 80, 160])} if op == Op.WRITE else {}
        call = ALL_GENERATORS[op](rng, hostile=hostile, **extra)  # the write kernel works in tiles of 32
        problems = check_call(call, device, backend)
        if problems:
            failures.append(f"{op.value} call {i} of random.Random({seed}), hostile={hostile}: " + "; ".join(problems))
    return failures


# -- larger calls (several grid-stride rounds, several write tiles, long plan rows) -----------------------------
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _records_with_chains(num_slots: int, chains: torch.Tensor, mode: int, sources: list[Any], seed: int
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 records [num_slots, 4] (random, then each chain stamped consistently) and each chain slot's token."""
    from kvcanary.backends.torch_ref._hash import ANCHOR_I64, mix3
    from kvcanary.backends.torch_ref._records import fold_sources

    gen = _gen(seed)
    rec = torch.randint(-(2**62), 2**62, (num_slots, 4), dtype=torch.int64, generator=gen)
    k, length = chains.shape
    toks = torch.randint(0, 50000, (k, length), dtype=torch.int64, generator=gen)
    running = torch.full((k,), ANCHOR_I64, dtype=torch.int64)
    for j in range(length):
        s = chains[:, j]
        rec[s, 0] = toks[:, j]
        rec[s, 1] = j
        rec[s, 2] = running
        running = mix3(running, toks[:, j], torch.full((k,), j, dtype=torch.int64))
    flat = chains.reshape(-1)
    rkv, _ = fold_sources(sources, mode, flat)
    rec[flat, 3] = rkv
    return rec, toks


def _sources(num_slots: int, nsrc: int, seed: int, rows_short: int = 0) -> list[Any]:
    from kvcanary.sources import RealKvSource

    gen = _gen(seed)
    out = []
    for i in range(nsrc):
        page = (1, 2, 1, 4)[i % 4]
        nbpt = (64, 32, 128, 48)[i % 4]
        rows = -(-num_slots // page) - (rows_short if i == 0 else 0)
        data = torch.randint(0, 256, (rows, page * nbpt + 16 * (i % 2)), dtype=torch.uint8, generator=gen)
        out.append(RealKvSource(tensor=data, page_size=page, num_bytes_per_token=nbpt, read_bytes=nbpt - 16 * (i % 2)))
    return out


def _context(buf: torch.Tensor, sources: list[Any], mode: int, ring_cap: int, device: torch.device | str) -> Any:
    from kvcanary.consts import CanaryLaunchTag, RealKvHashMode
    from kvcanary.context import VerifyOrWriteContext
    from kvcanary.sources import RealKvSource

    return VerifyOrWriteContext(
        canary_buf=buf.to(device), kernel_kind=CanaryLaunchTag.TAIL_K_FULL,
        violation_ring=torch.zeros(ring_cap, 8, dtype=torch.int64, device=device),
        violation_write_index=torch.zeros(1, dtype=torch.int32, device=device),
        slot_run_counter=torch.zeros(1, dtype=torch.int64, device=device),
        kernel_run_counter=torch.zeros(1, dtype=torch.int64, device=device),
        real_kv_sources=tuple(RealKvSource(tensor=s.tensor.to(device), page_size=s.page_size,
                                           num_bytes_per_token=s.num_bytes_per_token, read_bytes=s.read_bytes)
                              for s in sources),
        real_kv_hash_mode=RealKvHashMode(mode), enable_chain_position_assert=torch.ones(1, dtype=torch.int32,
                                                                                       device=device))


def _outputs(kw: dict[str, Any]) -> dict[str, torch.Tensor]:
    ctx = kw["context"]
    return {"canary_buf": ctx.canary_buf, "violation_ring": ctx.violation_ring,
            "violation_write_index": ctx.violation_write_index, "slot_run_counter": ctx.slot_run_counter,
            "kernel_run_counter": ctx.kernel_run_counter}


def big_verify_call(seed: int, *, chains: int, length: int, nsrc: int, mode: int, check: bool,
                    corrupt: int = 20) -> Call:
    """``chains`` x ``length`` chain entries (shuffled) over a buffer with a few corrupted records and bytes."""
    rng = random.Random(seed)
    num_slots = chains * length + 1 + rng.randint(0, 50)
    perm = torch.randperm(num_slots - 1, generator=_gen(seed)) + 1
    chain_slots = perm[: chains * length].view(chains, length)
    sources = _sources(num_slots, nsrc, seed + 1, rows_short=3)
    rec, toks = _records_with_chains(num_slots, chain_slots, mode, sources, seed + 2)
    prev = torch.cat([torch.full((chains, 1), -1, dtype=torch.int64), chain_slots[:, :-1]], dim=1)
    pos = torch.arange(length).expand(chains, length)
    entries = torch.stack([chain_slots, prev, pos, toks], dim=-1).reshape(-1, 4)
    entries = entries[torch.randperm(entries.shape[0], generator=_gen(seed + 3))]
    for _ in range(corrupt):  # corrupt records and KV bytes
        rec[rng.randrange(1, num_slots), rng.randrange(4)] ^= 1 << rng.randrange(63)
    for s in sources:
        for _ in range(corrupt):
            s.tensor[rng.randrange(s.tensor.shape[0]), rng.randrange(s.tensor.shape[1])] ^= 0x11
    extra = torch.tensor([[num_slots + 5, 3, 0, -1], [-1, 2, 0, -1], [3, num_slots, 1, -1], [0, -1, 0, -1]])
    entries = torch.cat([entries, extra])
    buf = rec.view(torch.uint8).reshape(num_slots, 32).clone()
    n = entries.shape[0]
    cap = n + 7

    def make(device: torch.device | str) -> dict[str, Any]:
        arr = torch.ones(cap, 4, dtype=torch.int64)
        arr[:n] = entries
        plan = VerifyPlan(
            verify_slot_indices=arr[:, 0].contiguous().to(device), verify_expected_tokens=arr[:, 3].contiguous().to(device),
            verify_expected_positions=arr[:, 2].contiguous().to(device),
            verify_prev_slot_indices=arr[:, 1].contiguous().to(device),
            verify_num_valid=torch.tensor([n], dtype=torch.int32, device=device),
            enable=torch.ones(1, dtype=torch.int32, device=device))
        return {"context": _context(buf, sources, mode, 4096, device), "plan": plan,
                "check_verify_expected_token": check}

    return Call(Op.VERIFY, make, _outputs, ring_base=0, order_sensitive=False, label="big verify")


def big_write_call(seed: int, *, requests: int, max_len: int, nsrc: int, mode: int, assert_inputs: bool) -> Call:
    """``requests`` requests of up to ``max_len`` tokens (skips, out-of-range slots, a few position jumps)."""
    rng = random.Random(seed)
    lens = [rng.choice([0, 1, rng.randint(1, max_len), max_len]) for _ in range(requests)]
    total = sum(lens)
    heads = requests * 2
    num_slots = total + heads + 8
    perm = (torch.randperm(num_slots - 1, generator=_gen(seed)) + 1).tolist()
    sources = _sources(num_slots, nsrc, seed + 1, rows_short=2)
    head_slots = torch.tensor(perm[:heads], dtype=torch.int64).view(requests, 2)
    rec, _ = _records_with_chains(num_slots, head_slots, mode, sources, seed + 2)
    free = perm[heads:]
    ids, poss, locs, seeds, offsets = [], [], [], [], [0]
    for r, ln in enumerate(lens):
        seed_kind = rng.random()
        seeds.append(int(head_slots[r, 1]) if seed_kind < 0.7 else (-1 if seed_kind < 0.9 else num_slots + 3))
        start = 2 if seed_kind < 0.7 else 0
        for j in range(ln):
            ids.append(rng.randint(0, 50000))
            poss.append(start + j + (1 if rng.random() < 0.01 else 0))
            x = rng.random()
            locs.append(free.pop() if x < 0.95 else (-1 if x < 0.98 else num_slots + rng.randint(0, 9)))
        offsets.append(len(ids))
    exp_t = [t if rng.random() < 0.98 else t + 1 for t in ids]
    exp_p = [p if rng.random() < 0.98 else p + 1 for p in poss]
    buf = rec.view(torch.uint8).reshape(num_slots, 32).clone()

    def make(device: torch.device | str) -> dict[str, Any]:
        def t(xs: list[int]) -> torch.Tensor:
            return torch.tensor([*xs, 7, 7], dtype=torch.int64, device=device)  # a padded tail

        plan = WritePlan(write_offsets=torch.tensor(offsets, dtype=torch.int64, device=device),
                         write_seed_slot_indices=torch.tensor(seeds, dtype=torch.int64, device=device),
                         write_num_valid_reqs=torch.tensor([requests], dtype=torch.int32, device=device))
        return {"context": _context(buf, sources, mode, 1 << 14, device), "plan": plan, "input_ids": t(ids),
                "positions": t(poss), "out_cache_loc": t(locs), "enable_write_input_assert": assert_inputs,
                "expected_input_tokens": t(exp_t) if assert_inputs else None,
                "expected_input_positions": t(exp_p) if assert_inputs else None}

    return Call(Op.WRITE, make, _outputs, ring_base=0, order_sensitive=False, label="big write")


def big_plan_call(seed: int, *, bs: int, max_prefix: int, lut: bool, pool: bool, window: int = 0,
                  cols: int | None = None, stray_rows: bool = False, prefixes: Sequence[int] | None = None,
                  slack: int | None = None) -> Call:
    """A plan over random rows. ``cols`` below ``max_prefix`` puts the ends of long rows past req_to_token (and
    the pool); ``stray_rows`` points a few requests past both tensors' rows. ``prefixes`` fixes the rows'
    prefix lengths (then no row is padding); ``slack`` entries of capacity past the total must stay untouched
    (random 0 or 5 otherwise)."""
    rng = random.Random(seed)
    gen = _gen(seed)
    max_reqs = bs + 3
    cols = max_prefix + 4 if cols is None else cols
    full_slots = bs * max_prefix + 10
    r2t = torch.randint(0, full_slots, (max_reqs, cols), dtype=torch.int32, generator=gen)
    rpi = [rng.randrange(1, max_reqs) if rng.random() < 0.95 else 0 for _ in range(bs)]
    if stray_rows:
        rpi = [r if rng.random() < 0.8 else rng.choice([max_reqs, max_reqs + 7, -3]) for r in rpi]
    prefix = [rng.choice([0, 1, rng.randint(0, max_prefix), max_prefix]) for _ in range(bs)]
    if prefixes is not None:
        assert len(prefixes) == bs and not stray_rows
        prefix = list(prefixes)
        rpi = [rng.randrange(1, max_reqs) for _ in range(bs)]
    extend = [rng.choice([0, 1, rng.randint(1, 64), -2]) for _ in range(bs)]
    lut_t = (torch.randint(0, full_slots, (full_slots - 5,), dtype=torch.int64, generator=gen)
             if lut or window else None)  # an SWA window needs the LUT
    pool_t = torch.randint(-5, 50000, (max_reqs, cols + 2), dtype=torch.int32, generator=gen) if pool else None
    valid = torch.tensor([rng.randint(0, cols + 3) for _ in range(bs)], dtype=torch.int64) if pool else None
    ws = [max(0, p - window) if window else 0 for p in prefix]
    total = sum(p - w for p, w, r in zip(prefix, ws, rpi, strict=True) if r != 0)
    cap = total + (rng.choice([0, 5]) if slack is None else slack)
    wcap = bs + 2
    token_offset = rng.choice([0, 1])

    def make(device: torch.device | str) -> dict[str, Any]:
        g2 = _gen(seed + 1)
        vp = VerifyPlan(
            verify_slot_indices=torch.randint(-9, 99, (cap,), generator=g2).to(device),
            verify_expected_tokens=torch.randint(-9, 99, (cap,), generator=g2).to(device),
            verify_expected_positions=torch.randint(-9, 99, (cap,), generator=g2).to(device),
            verify_prev_slot_indices=torch.randint(-9, 99, (cap,), generator=g2).to(device),
            verify_num_valid=torch.tensor([77], dtype=torch.int32, device=device),
            enable=torch.tensor([5], dtype=torch.int32, device=device),
            verify_offsets_scratch=torch.full((4097,), 3, dtype=torch.int64, device=device))
        wp = WritePlan(write_offsets=torch.randint(-9, 99, (wcap + 1,), generator=g2).to(device),
                       write_seed_slot_indices=torch.randint(-9, 99, (wcap,), generator=g2).to(device),
                       write_num_valid_reqs=torch.tensor([99], dtype=torch.int32, device=device))
        return {"verify_plan_out": vp, "write_plan_out": wp,
                "req_pool_indices": torch.tensor(rpi, dtype=torch.int64, device=device),
                "prefix_lens": torch.tensor(prefix, dtype=torch.int64, device=device),
                "extend_seq_lens": torch.tensor(extend, dtype=torch.int64, device=device),
                "req_to_token": r2t.to(device), "swa_window_size": window,
                "full_to_swa_index_mapping": None if lut_t is None else lut_t.to(device), "verify_capacity": cap,
                "req_to_verify_expected_tokens": None if pool_t is None else pool_t.to(device),
                "req_to_verify_expected_tokens_valid_lens": None if valid is None else valid.to(device),
                "kv_token_id_vs_position_offset": token_offset}

    def outputs(kw: dict[str, Any]) -> dict[str, torch.Tensor]:
        vp, wp = kw["verify_plan_out"], kw["write_plan_out"]
        out = {f"v.{k}": getattr(vp, k) for k in ("verify_slot_indices", "verify_expected_tokens",
                                                  "verify_expected_positions", "verify_prev_slot_indices",
                                                  "verify_num_valid", "enable", "verify_offsets_scratch")}
        out.update({f"w.{k}": getattr(wp, k) for k in ("write_offsets", "write_seed_slot_indices",
                                                       "write_num_valid_reqs")})
        return out

    return Call(Op.PLAN, make, outputs, label="big plan")


# rows ending just inside a warp's entries of a tile (32 x 4 = 128 of them; 512 with 16 entries per thread),
# the last one too, so that a warp storing past its row's end would overwrite the next row or the slack
ROWS_ENDING_MID_WARP = (2 * 4096 + 3 * 512 + 300, 511, 1, 4096 + 129, 5 * 512 - 1, 127, 4095, 4096 + 500)


def big_scatter_call(seed: int, *, bs: int, rows: int, cols: int) -> Call:
    rng = random.Random(seed)
    lens = [rng.choice([0, rng.randint(1, 2 * cols), cols]) for _ in range(bs)]
    offsets = [0]
    for ln in lens:
        offsets.append(offsets[-1] + ln)
    rpi = [rng.randrange(rows) if rng.random() < 0.97 else rng.choice([-1, rows]) for _ in range(bs)]
    ntok = max(offsets[-1] - 5, 0)  # the last request runs past flat_in
    flat = torch.randint(-(2**40), 2**40, (ntok,), dtype=torch.int64, generator=_gen(seed))
    pool = torch.randint(-50, 50, (rows, cols), dtype=torch.int32, generator=_gen(seed + 1))

    def make(device: torch.device | str) -> dict[str, Any]:
        return {"flat_in": flat.to(device), "offsets": torch.tensor(offsets, dtype=torch.int64, device=device),
                "req_pool_indices": torch.tensor(rpi, dtype=torch.int64, device=device),
                "pool_out": pool.clone().to(device)}

    return Call(Op.SCATTER, make, lambda kw: {"pool_out": kw["pool_out"]}, label="big scatter")


def fuzz_seed() -> int:
    """A fresh seed per run, or ``$KVCANARY_FUZZ_SEED`` to replay a failure."""
    import os

    env = os.environ.get("KVCANARY_FUZZ_SEED")
    return int(env) if env else random.SystemRandom().getrandbits(32)


def fuzz_count(default: int) -> int:
    import os

    return int(os.environ.get("KVCANARY_FUZZ_COUNT", default))


def cuda_skip_reason() -> str | None:
    """Why the GPU tests cannot run here (None: they can)."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    from kvcanary.backends.cuda import BACKEND

    reasons = list(BACKEND.availability()) + list(BACKEND.device_reasons(Op.VERIFY, torch.device("cuda")))
    return "; ".join(str(r) for r in reasons) or None

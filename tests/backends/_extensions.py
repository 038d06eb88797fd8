"""Extension scenarios: a two-step pipeline (plan, verify, write; twice) on every backend, with faults the
extension checks catch, and their encoding as golden-style vectors (``tests/golden/extensions_cases.json``).

A scenario is plain data (lists of ints), so it is its own golden encoding: the generator stores the
scenario and torch_ref's outputs; the replay rebuilds the tensors and compares any backend's outputs.
Step 1 prefills each request's prompt; step 2 verifies it and writes one or more new tokens (a draft run
writes several, EAGLE-style, with ``kv_token_id_vs_position_offset = 1``). The faults: zeroed
``req_to_token`` entries inside live prefixes (a prefix-miss row, a null block in a window), misdirected
``out_cache_loc`` entries (a draft past its allocation), padding tokens (-1), an idle padding batch row, and
an SWA LUT that translates some slots to 0 (evicted positions, to stay silent). An owner scenario
(:func:`make_owner`) also carries each step's owner map (per canary slot: the ``req_to_token`` row holding it,
-1 free, below -1 read-only) with the ownership faults the write-time owner check catches.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from typing import Any

import torch

from kvcanary.consts import CANARY_SLOT_BYTES, ZERO_SLOT_MARK, CanaryLaunchTag, FailReason, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary.extensions import Extensions
from kvcanary.launch.plan import launch_canary_plan_kernels
from kvcanary.launch.verify import launch_canary_verify_kernel
from kvcanary.launch.write import launch_canary_write_kernel
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.registry import Op
from kvcanary.testing.builders import Call

Scenario = dict[str, Any]
NUM_SLOTS = 96
ROWS, COLS = 5, 40
CAPACITY = 160
RING = 256
ALL = Extensions(**{f.name: True for f in dataclasses.fields(Extensions)})
"""Every extension flag on."""


def make(seed: int) -> Scenario:
    """A random scenario (the same for the same seed)."""
    rnd = random.Random(seed)
    swa = rnd.random() < 0.35
    offset = 1 if rnd.random() < 0.3 else 0
    free = list(range(1, NUM_SLOTS))
    rnd.shuffle(free)
    r2t = [[0] * COLS for _ in range(ROWS)]
    reqs = []
    for row in range(1, 1 + rnd.randint(1, ROWS - 1)):
        prompt = rnd.randint(1, 14)
        new = rnd.randint(1, 4)
        for p in range(prompt + new):
            r2t[row][p] = free.pop()
        reqs.append((row, prompt, new))
    lut = None
    window = 0
    if swa:
        perm = list(range(1, NUM_SLOTS))
        rnd.shuffle(perm)  # one-to-one (two full slots sharing an SWA slot in a launch is unspecified)
        lut = [0] + [s if rnd.random() > 0.15 else 0 for s in perm]
        window = rnd.randint(0, 8)
    zeros = [(row, rnd.randrange(prompt)) for row, prompt, _ in reqs if rnd.random() < 0.6]
    steps = []
    for step in range(2):
        rpi, prefix, extend, ids, poss, locs = [], [], [], [], [], []
        for row, prompt, new in reqs:
            lo, n = (0, prompt) if step == 0 else (prompt, new)
            rpi.append(row)
            prefix.append(lo)
            extend.append(n)
            for p in range(lo, lo + n):
                ids.append(rnd.randrange(1000))
                poss.append(p)
                loc = r2t[row][p]
                if step == 1 and rnd.random() < 0.3:
                    # a padding token, or a slot nobody owns (a misdirected write; never one another token of
                    # the launch writes, whose record would then be unspecified)
                    loc = -1 if rnd.random() < 0.3 or not free else free.pop()
                locs.append(loc)
        if rnd.random() < 0.5:  # an idle CUDA-graph padding row
            rpi.append(0)
            prefix.append(rnd.randint(0, 3))
            extend.append(0)
        steps.append({"rpi": rpi, "prefix": prefix, "extend": extend, "ids": ids, "pos": poss, "loc": locs})
    return {"seed": seed, "req_to_token": r2t, "lut": lut, "window": window, "offset": offset, "zeros": zeros,
            "steps": steps}


def canary_slot(lut: list[int] | None, slot: int) -> int:
    """The canary slot a scenario's (full-pool) ``loc`` is written at: the LUT's slot for an SWA group, -1 for a
    padding token or a slot the LUT sends to 0 (how :func:`run` stages them)."""
    if slot < 0 or lut is None:
        return slot
    return lut[slot] if lut[slot] != 0 else -1


def make_owner(seed: int) -> Scenario:
    """A random owner scenario: two or more requests, each step's owner map, and ownership faults.

    Every allocated slot is held by its request's row. Faults, on slots a token writes (each at most once per
    launch, and never a slot another request's chain continues from in the same launch): the slot also given
    to another live request (the map names the other row), freed while still written (-1), handed to the
    prefix cache (below -1), a token written into another request's older prefix slot or into a slot nobody
    was given. Silent on purpose: step 2 marks some requests' prompt slots read-only (cached after the
    prefill) without writing them, and an idle padding row.
    """
    rnd = random.Random(seed)
    swa = rnd.random() < 0.3
    free = list(range(1, NUM_SLOTS))
    rnd.shuffle(free)
    r2t = [[0] * COLS for _ in range(ROWS)]
    reqs = []
    for row in range(1, 1 + rnd.randint(2, ROWS - 1)):
        prompt, new = rnd.randint(2, 12), rnd.randint(1, 4)
        for p in range(prompt + new):
            r2t[row][p] = free.pop()
        reqs.append((row, prompt, new))
    lut = None
    if swa:
        perm = list(range(1, NUM_SLOTS))
        rnd.shuffle(perm)
        lut = [0] + [s if rnd.random() > 0.1 else 0 for s in perm]
    base = [-1] * NUM_SLOTS
    for row, prompt, new in reqs:
        for p in range(prompt + new):
            c = canary_slot(lut, r2t[row][p])
            if c > 0:
                base[c] = row
    rows = [row for row, _, _ in reqs]
    # older prefix slots of each request: neither a seed of step 2 nor written by it
    older = [(row, r2t[row][p]) for row, prompt, _ in reqs for p in range(prompt - 1)]
    rnd.shuffle(older)
    steps, owners = [], []
    for step in range(2):
        owner = list(base)
        if step == 1:
            for row, prompt, _ in reqs:
                if rnd.random() < 0.4:  # the prefill's slots handed to the prefix cache: read-only, not written
                    for p in range(prompt):
                        c = canary_slot(lut, r2t[row][p])
                        if c > 0:
                            owner[c] = -2 - row
        rpi, prefix, extend, ids, poss, locs = [], [], [], [], [], []
        for row, prompt, new in reqs:
            lo, n = (0, prompt) if step == 0 else (prompt, new)
            rpi.append(row)
            prefix.append(lo)
            extend.append(n)
            for p in range(lo, lo + n):
                loc = r2t[row][p]
                fault = rnd.random() if rnd.random() < (0.15 if step == 0 else 0.5) else -1.0
                if 0 <= fault < 0.2 and step == 1 and older:
                    other, loc = older.pop()  # into another request's (or its own) older prefix slot
                    if other == row:
                        loc = r2t[row][p]
                elif 0 <= fault < 0.35 and step == 1 and free:
                    loc = free.pop()  # a slot nobody was given
                c = canary_slot(lut, loc)
                if c > 0 and 0.35 <= fault < 0.6:
                    owner[c] = rnd.choice([r for r in rows if r != row])  # double allocation
                elif c > 0 and 0.6 <= fault < 0.8:
                    owner[c] = -1  # freed while the request still writes it
                elif c > 0 and fault >= 0.8:
                    owner[c] = -2 - rnd.randrange(3)  # a prefix-cache entry
                ids.append(rnd.randrange(1000))
                poss.append(p)
                locs.append(loc)
        if rnd.random() < 0.5:
            rpi.append(0)
            prefix.append(rnd.randint(0, 3))
            extend.append(0)
        steps.append({"rpi": rpi, "prefix": prefix, "extend": extend, "ids": ids, "pos": poss, "loc": locs})
        owners.append(owner)
    return {"seed": seed, "req_to_token": r2t, "lut": lut, "window": rnd.randint(0, 6) if swa else 0,
            "offset": 1 if rnd.random() < 0.3 else 0, "zeros": [], "steps": steps, "owner": owners}


def _t(v: list[Any], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    return torch.tensor(v, dtype=dtype, device=device)


def run(sc: Scenario, backend: str, ext: Extensions | None, device: torch.device | str = "cpu", *,
        capture: bool = False) -> dict[str, Any]:
    """Both steps on ``backend``: the verify plans' active entries, the ring rows (a multiset), the canary
    buffer. The zeroed entries are applied to req_to_token after step 1 (the prefill wrote the real slots).
    ``capture``: step 2's launches are captured in a CUDA graph and replayed once (the kernels must already be
    loaded: run the scenario once without it first)."""
    r2t = _t(sc["req_to_token"], torch.int32, device)
    owners = [_t(o, torch.int64, device) for o in sc["owner"]] if sc.get("owner") is not None else None
    lut = None if sc["lut"] is None else _t(sc["lut"], torch.int64, device)
    buf = torch.zeros(NUM_SLOTS, CANARY_SLOT_BYTES, dtype=torch.uint8, device=device)
    ring = torch.zeros(RING, 8, dtype=torch.int64, device=device)
    widx = torch.zeros(1, dtype=torch.int32, device=device)
    ctx = VerifyOrWriteContext(
        canary_buf=buf, kernel_kind=CanaryLaunchTag.TAIL_K_SWA if lut is not None else CanaryLaunchTag.TAIL_K_FULL,
        violation_ring=ring, violation_write_index=widx, slot_run_counter=torch.zeros(1, dtype=torch.int64,
                                                                                      device=device),
        kernel_run_counter=torch.zeros(1, dtype=torch.int64, device=device), real_kv_sources=(),
        real_kv_hash_mode=RealKvHashMode.NONE, enable_chain_position_assert=torch.ones(1, dtype=torch.int32,
                                                                                       device=device))
    vp = VerifyPlan.allocate(verify_capacity=CAPACITY, device=device)
    wp = WritePlan.allocate(write_req_capacity=8, device=device)
    staged = []
    for st in sc["steps"]:
        loc = _t(st["loc"], torch.int64, device)
        if lut is not None:  # an SWA group's write names SWA slots (padding tokens stay negative); a slot the
            # LUT sends to 0 is written as a padding token (several records written to slot 0 in one launch
            # would be unspecified)
            swa = lut[loc.clamp(min=0)]
            loc = torch.where((loc >= 0) & (swa != 0), swa, -1)
        staged.append((_t(st["rpi"], torch.int64, device), _t(st["prefix"], torch.int64, device),
                       _t(st["extend"], torch.int64, device), _t(st["ids"], torch.int64, device),
                       _t(st["pos"], torch.int64, device), loc))

    def launches(k: int) -> None:
        rpi, prefix, extend, ids, pos, loc = staged[k]
        launch_canary_plan_kernels(
            verify_plan_out=vp, write_plan_out=wp, req_pool_indices=rpi, prefix_lens=prefix, extend_seq_lens=extend,
            req_to_token=r2t, swa_window_size=sc["window"], full_to_swa_index_mapping=lut, verify_capacity=CAPACITY,
            req_to_verify_expected_tokens=None, req_to_verify_expected_tokens_valid_lens=None,
            kv_token_id_vs_position_offset=sc["offset"], extensions=ext, backend=backend)
        launch_canary_verify_kernel(context=ctx, plan=vp, check_verify_expected_token=False, extensions=ext,
                                    backend=backend)
        launch_canary_write_kernel(
            context=ctx, plan=wp, input_ids=ids, positions=pos, out_cache_loc=loc, enable_write_input_assert=False,
            expected_input_tokens=None, expected_input_positions=None, req_pool_indices=rpi, req_to_token=r2t,
            full_to_swa_index_mapping=lut, slot_owner=None if owners is None else owners[k], extensions=ext,
            backend=backend)

    plans = []
    for k in range(len(staged)):
        if k == 1:
            for row, p in sc["zeros"]:
                r2t[row, p] = 0
        if capture and k == 1:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                launches(k)
            graph.replay()
        else:
            launches(k)
        n = int(vp.verify_num_valid[0])
        plans.append(vp.verify_slot_indices[:n].cpu().tolist())
    total = int(widx[0])
    rows = sorted(tuple(int(v) for v in r) for r in ring[: min(total, RING)].cpu().tolist())
    return {"plans": plans, "rows": [list(r) for r in rows], "total": total,
            "canary_buf": buf.view(torch.int64).cpu().tolist()}


def bits_count(out: dict[str, Any], bit: int) -> int:
    """How many rows carry ``bit``."""
    return sum(1 for r in out["rows"] if r[7] & bit)


def row_multiset(out: dict[str, Any]) -> Counter[tuple[int, ...]]:
    return Counter(tuple(r) for r in out["rows"])


def with_extensions(call: Call, rng: random.Random) -> Call:
    """``call`` with every extension on; a write also gets random (hostile) tables and owner map, a verify a few
    marked slots."""
    seed = rng.getrandbits(32)
    make = call.make

    def made(device: torch.device | str) -> dict[str, Any]:
        kw = dict(make(device))
        r = random.Random(seed)
        kw["extensions"] = ALL
        if call.op == Op.WRITE:
            rows, cols = r.randint(1, 6), r.randint(1, 24)
            hi = kw["context"].canary_buf.shape[0] + 3
            r2t = [r.choice([0, r.randint(-3, hi)]) for _ in range(rows * cols)]
            kw["req_to_token"] = torch.tensor(r2t, dtype=torch.int32, device=device).reshape(rows, cols)
            kw["req_pool_indices"] = torch.tensor([r.randint(-1, rows) for _ in range(r.randint(0, 6))],
                                                  dtype=torch.int64, device=device)
            kw["slot_owner"] = torch.tensor([r.randint(-3, rows + 1) for _ in range(hi - 3)], dtype=torch.int64,
                                            device=device)
            if r.random() < 0.5:
                kw["full_to_swa_index_mapping"] = torch.tensor(
                    [r.randint(-2, hi) for _ in range(r.randint(1, hi))], dtype=torch.int64, device=device)
        if call.op == Op.VERIFY:
            slots = kw["plan"].verify_slot_indices
            for _ in range(r.randint(0, 3)):
                if slots.shape[0]:
                    slots[r.randrange(slots.shape[0])] = ZERO_SLOT_MARK
        return kw

    return dataclasses.replace(call, make=made)
def expected_extension_rows(sc: Scenario, ext: Extensions | None) -> Counter[tuple[int, ...]]:
    """The rows the two extension checks must add for ``sc``, derived from their definitions in plain Python
    (no kernel, no torch): ZERO_SLOT_IN_LIVE_RANGE as ``(kernel kind, 0, position, bits)``, WRITE_SLOT_MISMATCH
    as ``(out_cache_loc, position, token, expected slot, bits)``.

    Step 2's verify reads, for every request row but the padding row, the positions of its window
    ``[max(prefix - window, 0), prefix)`` (``[0, prefix)`` without a window): a ``req_to_token`` entry of 0
    there is a zero slot inside the live range. Step 1 verifies nothing (every prefix is 0). Each write compares
    every written token's slot (padding tokens, ``-1``, are skipped) with ``req_to_token[row][position]``,
    both seen through the SWA table when there is one.
    """
    out: Counter[tuple[int, ...]] = Counter()
    if ext is None:
        return out
    zero_bit, wslot_bit = int(FailReason.ZERO_SLOT_IN_LIVE_RANGE), int(FailReason.WRITE_SLOT_MISMATCH)
    lut: list[int] | None = sc["lut"]
    kind = int(CanaryLaunchTag.TAIL_K_SWA if lut is not None else CanaryLaunchTag.TAIL_K_FULL)
    r2t = [list(row) for row in sc["req_to_token"]]
    for k, st in enumerate(sc["steps"]):
        if k == 1:
            for row, p in sc["zeros"]:
                r2t[row][p] = 0
            if ext.zero_slot_in_live_range:
                for row, prefix in zip(st["rpi"], st["prefix"], strict=True):
                    start = max(prefix - sc["window"], 0) if sc["window"] > 0 else 0
                    out.update((kind, 0, p, zero_bit) for p in range(start, prefix) if row != 0 and r2t[row][p] == 0)
        if not ext.write_slot_mismatch:
            continue
        token = 0
        for row, n in zip(st["rpi"], st["extend"], strict=True):
            for _ in range(n):
                loc, pos, tok = st["loc"][token], st["pos"][token], st["ids"][token]
                token += 1
                want = r2t[row][pos]
                if lut is not None:
                    loc = lut[loc] if loc >= 0 and lut[loc] != 0 else -1  # as :func:`run` stages it
                    want = lut[want]
                if loc >= 0 and row != 0 and loc != want:
                    out[(loc, pos, tok, want, wslot_bit)] += 1
    return out


def extension_rows(out: dict[str, Any]) -> Counter[tuple[int, ...]]:
    """The rows of a run's ring that carry an extension bit, in :func:`expected_extension_rows`' form."""
    zero_bit, wslot_bit = int(FailReason.ZERO_SLOT_IN_LIVE_RANGE), int(FailReason.WRITE_SLOT_MISMATCH)
    got: Counter[tuple[int, ...]] = Counter()
    for r in out["rows"]:
        if r[7] & zero_bit:
            got[(r[0], r[1], r[2], r[7])] += 1
        if r[7] & wslot_bit:
            got[(r[1], r[2], r[3], r[6], r[7])] += 1
    return got

"""verify_budget's parity cases, shared by the Triton and CUDA tests: random calls and their comparison.

Random batches (requests of no entries, of only newest ones, of fewer older entries than the stride and of
many), cursors past a request's older entries, a full plan cut short (overflow, enable 0), kept entries past
the output's capacity, a count past the plan's capacity, the cursors held back (``advance`` 0) and padding requests (no entries) that name a real
request's row, with the overflow counter ``skipped_verifies`` given or not. Compared with torch_ref on
the CPU: the count, the enable, the cursors, the overflow counter and the kept entries below the count (past it
the output is undefined). And runs of launches over sliding (SWA) and growing (full attention) windows, each
backend carrying its own cursors (token positions) from launch to launch.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from kvcanary.launch.budget import launch_verify_budget_kernel

PLAN = ("verify_slot_indices", "verify_expected_tokens", "verify_expected_positions", "verify_prev_slot_indices")
Kwargs = dict[str, Any]


def random_call(rng: random.Random, *, bs: int, cap_in: int, cap_out: int, rows: int) -> Kwargs:
    counts = [rng.choice([0, 1, 2, 3, 5, 9, rng.randint(10, 40)]) for _ in range(bs)]
    rpi = rng.sample(range(rows), bs)
    if bs and rng.random() < 0.5:  # padding rows (no entries) naming a real request's row, as a graph's bucket pads
        pad = rng.randint(1, 3)
        counts += [0] * pad
        rpi += [rpi[rng.randrange(bs)]] * pad
    off = [0]
    for c in counts:
        off.append(off[-1] + c)
    total = off[-1]
    n = min(total, cap_in, rng.choice([total, total, rng.randint(0, max(total, 1))]))
    if rng.random() < 0.15:  # a count past the plan's capacity (no entry exists there: none may be kept)
        n = cap_in + rng.randint(1, 20)
    g = torch.Generator().manual_seed(rng.getrandbits(62))
    kw: Kwargs = {
        "req_pool_indices": torch.tensor(rpi, dtype=torch.int64),
        "verify_offsets_scratch": torch.tensor(off + [rng.randint(0, 9)] * 3, dtype=torch.int64),
        "verify_num_valid": torch.tensor([n], dtype=torch.int32),
        "verify_enable": torch.tensor([int(n == min(total, cap_in) and total <= cap_in)], dtype=torch.int32),
        "cursor": torch.randint(0, 60, (rows,), dtype=torch.int64, generator=g),
        "advance": torch.tensor([rng.choice([0, 1, 1])], dtype=torch.int64),
        "out_verify_num_valid": torch.tensor([-7], dtype=torch.int32),
        "out_verify_enable": torch.tensor([-7], dtype=torch.int32),
        "newest_per_request": rng.choice([0, 1, 2, 3]), "stride": rng.choice([1, 2, 4, 7]),
    }
    if rng.random() < 0.7:  # the overflow counter, from some earlier count
        kw["skipped_verifies"] = torch.tensor([rng.randint(0, 50)], dtype=torch.int64)
    for name in PLAN:
        kw[name] = torch.randint(-(2**40), 2**40, (cap_in,), dtype=torch.int64, generator=g)
        kw["out_" + name] = torch.full((cap_out,), -9, dtype=torch.int64)
    return kw


def run(kw: Kwargs, dev: torch.device, backend: str) -> Kwargs:
    mine: Kwargs = {k: v.to(dev, copy=True) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    launch_verify_budget_kernel(**mine, backend=backend)
    return {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in mine.items()}


def overflow_counts(dev: torch.device, backend: str, *, min_bs: int = 0) -> list[str]:
    """The overflow counter by hand: from 5, a launch adds 1 when the full plan overflowed (enable 0) and 0
    when it did not, in a batch of requests (and, from ``min_bs`` 0, an empty batch); the same call without the
    counter writes the same outputs. What differs."""
    out: list[str] = []
    for bs in sorted({min_bs, 3}):
        for enable in (0, 1):
            kw = random_call(random.Random(bs * 2 + enable), bs=bs, cap_in=50, cap_out=24, rows=12)
            kw["verify_enable"] = torch.tensor([enable], dtype=torch.int32)
            kw["skipped_verifies"] = torch.tensor([5], dtype=torch.int64)
            counted = run(kw, dev, backend)
            got = int(counted["skipped_verifies"][0])
            if got != 6 - enable:
                out.append(f"bs {bs}, enable {enable}: skipped_verifies 5 -> {got}, want {6 - enable}")
            del kw["skipped_verifies"]
            plain = run(kw, dev, backend)
            n = int(plain["out_verify_num_valid"][0])
            for name in ("out_verify_num_valid", "out_verify_enable", "cursor"):
                if not torch.equal(plain[name], counted[name]):
                    out.append(f"bs {bs}, enable {enable}: {name} differs with the counter")
            for name in PLAN:
                if not torch.equal(plain["out_" + name][:n], counted["out_" + name][:n]):
                    out.append(f"bs {bs}, enable {enable}: out_{name} differs with the counter")
    return out


def repeated_counts(dev: torch.device, backend: str) -> list[int]:
    """The counter after each of three launches of the same tensors (a launcher's repeat-call path: the prepared
    launch), the plan's enable 0, then 1, then 0 (want ``[1, 1, 2]``)."""
    kw = random_call(random.Random(11), bs=4, cap_in=50, cap_out=24, rows=12)
    kw = {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
    kw["skipped_verifies"] = torch.zeros(1, dtype=torch.int64, device=dev)
    seen = []
    for enable in (0, 1, 0):
        kw["verify_enable"].fill_(enable)
        launch_verify_budget_kernel(**kw, backend=backend)
        seen.append(int(kw["skipped_verifies"][0]))
    return seen


def mismatches(rng: random.Random, dev: torch.device, backend: str, *, cases: int, min_bs: int = 0) -> list[str]:
    """``cases`` random calls run on ``backend`` (on ``dev``) and on torch_ref (CPU): what differs."""
    out: list[str] = []
    for case in range(cases):
        bs = rng.choice([min_bs, 1, rng.randint(2, 9)])
        kw = random_call(rng, bs=bs, cap_in=rng.choice([1, 50, 300]), cap_out=rng.choice([3, 24, 96]), rows=12)
        want = run(kw, torch.device("cpu"), "torch_ref")
        got = run(kw, dev, backend)
        n = int(want["out_verify_num_valid"][0])
        if n > int(kw["verify_slot_indices"].shape[0]):
            out.append(f"case {case}: torch_ref keeps {n} entries, past the plan's capacity")
        if int(got["out_verify_num_valid"][0]) != n:
            out.append(f"case {case}: count {int(got['out_verify_num_valid'][0])} != {n}")
        for name in ("out_verify_enable", "cursor", "skipped_verifies"):
            if name in kw and not torch.equal(got[name], want[name]):
                out.append(f"case {case}: {name} {got[name].tolist()} != {want[name].tolist()}")
        for name in PLAN:
            if not torch.equal(got["out_" + name][:n], want["out_" + name][:n]):
                out.append(f"case {case}: out_{name} differs below the count")
    return out


def sliding_mismatches(rng: random.Random, dev: torch.device, backend: str, *, cases: int, steps: int = 6) -> list[str]:
    """``cases`` runs of ``steps`` launches of a plan whose requests slide (an SWA group: each request's entries
    are the ``W`` tokens from position ``p``, and ``p`` moves ``E`` a step) or grow from position 0 (full
    attention, ``E`` more entries a step), from random cursors (before, inside and past each window), with the
    cursors held back now and then (``advance`` 0) and an overflowed plan (enable 0) now and then. Each backend
    carries its own cursors from launch to launch; compared with torch_ref after each: what differs."""
    out: list[str] = []
    for case in range(cases):
        bs = rng.randint(1, 6)
        newest, stride = rng.choice([0, 1, 2]), rng.choice([1, 2, 4, 7])
        sliding = [rng.random() < 0.7 for _ in range(bs)]
        width = [rng.randint(1, 40) if sl else rng.randint(0, 12) for sl in sliding]  # SWA: W; full: the length
        pos0 = [rng.randint(0, 200) if sl else 0 for sl in sliding]
        moves = [rng.randint(1, 3) for _ in range(bs)]
        rows = 8
        rpi = rng.sample(range(rows), bs)
        cursor = torch.tensor([rng.randint(-50, 300) for _ in range(rows)], dtype=torch.int64)
        theirs = {"cpu": cursor.clone(), backend: cursor.clone()}
        for step in range(steps):
            off: list[int] = [0]
            pos: list[int] = []
            for r in range(bs):
                pos += range(pos0[r], pos0[r] + width[r])
                off.append(off[-1] + width[r])
            total = off[-1]
            cap_in = max(total, 1)
            overflow = total > 0 and rng.random() < 0.2
            n = rng.randint(0, total - 1) if overflow else total
            positions = torch.tensor(pos + [0] * (cap_in - total), dtype=torch.int64)
            kw: Kwargs = {
                "req_pool_indices": torch.tensor(rpi, dtype=torch.int64),
                "verify_offsets_scratch": torch.tensor(off, dtype=torch.int64),
                "verify_num_valid": torch.tensor([n], dtype=torch.int32),
                "verify_enable": torch.tensor([0 if overflow else 1], dtype=torch.int32),
                "advance": torch.tensor([rng.choice([0, 1, 1])], dtype=torch.int64),
                "out_verify_num_valid": torch.tensor([-7], dtype=torch.int32),
                "out_verify_enable": torch.tensor([-7], dtype=torch.int32),
                "newest_per_request": newest, "stride": stride,
                "verify_slot_indices": positions * 3 + 1000, "verify_expected_tokens": positions * 5 - 7,
                "verify_expected_positions": positions, "verify_prev_slot_indices": positions * 3 + 997,
            }
            cap_out = rng.choice([total + 1, max(total // 2, 1)])  # room for all, or kept entries cut off
            for name in PLAN:
                kw["out_" + name] = torch.full((cap_out,), -9, dtype=torch.int64)
            want = run({**kw, "cursor": theirs["cpu"]}, torch.device("cpu"), "torch_ref")
            got = run({**kw, "cursor": theirs[backend]}, dev, backend)
            theirs = {"cpu": want["cursor"], backend: got["cursor"]}
            c = int(want["out_verify_num_valid"][0])
            where = f"case {case}, step {step}"
            if int(got["out_verify_num_valid"][0]) != c:
                out.append(f"{where}: count {int(got['out_verify_num_valid'][0])} != {c}")
            if not torch.equal(got["cursor"], want["cursor"]):
                out.append(f"{where}: cursor {got['cursor'].tolist()} != {want['cursor'].tolist()}")
            for name in PLAN:
                if not torch.equal(got["out_" + name][:c], want["out_" + name][:c]):
                    out.append(f"{where}: out_{name} differs below the count")
            for r in range(bs):
                if sliding[r]:
                    pos0[r] += moves[r]
                else:
                    width[r] += moves[r]
    return out


GUARD = 64
"""Elements of sentinel on each side of a guarded output (what :func:`writes_outside` watches)."""


def writes_outside(rng: random.Random, dev: torch.device, backend: str, *, cases: int) -> list[str]:
    """``cases`` calls with garbage offsets (decreasing, negative, huge: no plan builds them; the launcher cannot
    read device values to refuse them) and a huge stride, each output a slice of a larger buffer: what
    ``backend`` wrote outside its outputs, or a count outside ``[0, capacity]``."""
    out: list[str] = []
    for case in range(cases):
        bs = rng.randint(1, 9)
        cap_out = rng.choice([3, 24])
        kw = random_call(rng, bs=bs, cap_in=rng.choice([1, 50]), cap_out=cap_out, rows=12)
        kw["verify_offsets_scratch"] = torch.tensor(
            [rng.choice([rng.randint(-40, 40), rng.randint(0, 2**62)]) for _ in range(bs + 4)], dtype=torch.int64)
        kw["stride"] = rng.choice([1, 3, 2**62])
        kw = {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        whole = {name: torch.full((cap_out + 2 * GUARD,), -5, dtype=torch.int64, device=dev) for name in PLAN}
        for name in PLAN:
            kw["out_" + name] = whole[name][GUARD : GUARD + cap_out]
        launch_verify_budget_kernel(**kw, backend=backend)
        for name in PLAN:
            w = whole[name].cpu()
            if bool((w[:GUARD] != -5).any()) or bool((w[GUARD + cap_out :] != -5).any()):
                out.append(f"case {case}: out_{name} written outside its {cap_out} elements")
        n = int(kw["out_verify_num_valid"][0])
        if not 0 <= n <= cap_out:
            out.append(f"case {case}: count {n} outside [0, {cap_out}]")
    return out


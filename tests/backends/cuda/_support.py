"""What the cuda backend's GPU tests, its host-emulation tests and the GPU sanitizer run (tests/gpu) share.

Golden-vector checks compare a backend's outputs with the vectors and with ``torch_ref`` on the CPU (the
specification), violation rows as a multiset (a parallel kernel appends them in any order). The inputs of the
random and larger calls come from ``tools.scenarios`` (:data:`large_verify` and :data:`large_write`
are its larger calls with every hostile feature on), their checks from ``kvcanary.testing.parity``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from functools import partial

import torch

from kvcanary.registry import Op
from kvcanary.testing.parity import compare_outputs, ring_rows
from tests.golden import loader as g
from tools.scenarios import large_verify_call, large_write_call

large_verify = partial(large_verify_call, short_sources=True)
"""Larger verify calls whose first real-KV source stops short of the buffer."""
large_write = partial(large_write_call, vary=True, hostile=True, short_sources=True)
"""Larger write calls of varied lengths, seeds and slots past the buffer, a short first source."""

Runner = Callable[..., dict[str, torch.Tensor]]
RUNNERS: dict[str, Runner] = {
    "verify_cases": g.run_verify, "write_cases": g.run_write, "plan_cases": g.run_plan, "scatter_cases": g.run_scatter,
}
QUIRKS_KEPT = ("write_quirk_num_valid_reqs_beyond_bs_writes_nothing", "verify_quirk_negative_num_valid_is_noop")

# rows ending just inside a warp's entries of a tile (32 x 4 = 128 of them; 512 with 16 entries per thread),
# the last one too, so that a warp storing past its row's end would overwrite the next row or the slack
ROWS_ENDING_MID_WARP = (2 * 4096 + 3 * 512 + 300, 511, 1, 4096 + 129, 5 * 512 - 1, 127, 4095, 4096 + 500)


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


def fuzz_seed() -> int:
    """A fresh seed per run, or ``$KVCANARY_FUZZ_SEED`` to replay a failure."""
    env = os.environ.get("KVCANARY_FUZZ_SEED")
    return int(env) if env else random.SystemRandom().getrandbits(32)


def fuzz_count(default: int) -> int:
    """``$KVCANARY_FUZZ_COUNT`` scenarios per operation, or ``default``."""
    return int(os.environ.get("KVCANARY_FUZZ_COUNT", default))


def cuda_skip_reason() -> str | None:
    """Why the GPU tests cannot run here (None: they can)."""
    if not torch.cuda.is_available():
        return "no CUDA device"
    from kvcanary_backends.cuda import BACKEND

    reasons = list(BACKEND.availability()) + list(BACKEND.device_reasons(Op.VERIFY, torch.device("cuda")))
    return "; ".join(str(r) for r in reasons) or None

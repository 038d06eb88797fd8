"""Hostile device values: torch_ref, the Triton kernels and the CUDA kernels (host emulation) agree byte for byte
and never write outside their tensors.

Every launch is drawn by ``tests/backends/_hostile.py`` (lengths and offsets at the int64 limits, slots and
rows outside their tensors, counts past capacities, a write index at the int32 limits, empty rings, hostile
tags) and built with every tensor a view in the middle of a guard buffer; a backend passes when its outputs
equal torch_ref's (rings as multisets) and no guard byte changed. On this CPU the Triton kernels run in
Triton's interpreter and the CUDA kernels in the host emulation; ``test_hostile_gpu.py`` runs the same
recipes on a GPU. Set ``KVCANARY_HOSTILE_EXAMPLES`` for a longer run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvcanary as kc
from kvcanary.registry import REGISTRY, Op, register_backend
from tests.backends import _hostile as h

EXAMPLES = int(os.environ.get("KVCANARY_HOSTILE_EXAMPLES", "12"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _emulation() -> bool:
    from tests.backends.cuda import _emu

    return _emu.compiler() is not None


@pytest.fixture(scope="module")
def backends() -> Iterator[list[str]]:
    """triton (the interpreter on this CPU) and, with a C++ compiler, the CUDA kernels' host emulation.

    On a machine with a GPU, Triton is built for it and declines the CPU: ``test_hostile_gpu.py`` covers it.
    """
    names = [] if REGISTRY.get("triton").static_reasons(Op.VERIFY, torch.device("cpu")) else ["triton"]
    if _emulation():
        from tests.backends.cuda import _emu

        register_backend(_emu.BACKEND, replace=True)
        names.append("cuda_emu")
    if not names:
        pytest.skip("neither the Triton interpreter nor a C++ compiler for the CUDA emulation is here")
    yield names
    if "cuda_emu" in names:
        REGISTRY.unregister("cuda_emu")


def _check(recipe: h.Recipe, backends: list[str]) -> None:
    for name in backends:
        problems = h.compare(recipe, "cpu", name)
        assert not problems, f"{recipe.label} on {name}: " + "; ".join(problems)


@pytest.mark.parametrize("op", list(h.RECIPES), ids=lambda o: o.value)
def test_hostile_values_agree_with_the_reference_and_stay_in_bounds(op: Op, backends: list[str]) -> None:
    @SETTINGS
    @given(h.RECIPES[op]())
    def one(recipe: h.Recipe) -> None:
        _check(recipe, backends)

    one()


M = h.I64_MAX


def _fused(prefix: list[int], extend: list[int], cap: int = 4, swa: int = 0) -> h.Recipe:
    bs = len(prefix)
    draw = h.PlanDraw(rpi=list(range(1, bs + 1)), prefix=prefix, extend=extend,
                      r2t=torch.arange(5 * 6, dtype=torch.int32).view(5, 6), swa=swa,
                      lut=[3, 1, 4, 1, 5] if swa else None, pool=None, valid=None, offset=0, cap=cap, wcap=bs,
                      init=list(range(4 * cap + 2 * bs + 1)), scratch=True)

    def build(g: h.Guarded) -> h.Kwargs:
        return {"verify_plan_out": draw.verify_plan(g), "write_plan_out": draw.write_plan(g), **draw.inputs(g),
                "extend_seq_lens": g("extend_seq_lens", extend), "verify_capacity": cap, **draw.pool_inputs(g)}

    return h.Recipe(Op.PLAN, build, h._plan_outputs, label=f"plan prefix={prefix} extend={extend} swa={swa}")


@pytest.mark.parametrize(("prefix", "extend"), [
    ([M, M, 3], [1, 1, 1]),  # the fuzzer's reproducer: the verify total wraps to 1
    ([M, 1], [0, 0]),  # one INT64_MAX beside any other active row
    ([2**62, 2**62, 2**62], [M, M, 2]),  # both totals cross 2**63
    ([-(2**63), 5, 3], [-1, M, M]),  # a prefix at INT64_MIN (its window start must not wrap either)
    ([3, 2, 1], [M, M, M]),  # only the write offsets saturate
])
def test_sums_that_would_wrap_saturate_on_every_backend(prefix: list[int], extend: list[int],
                                                        backends: list[str]) -> None:
    """The fused plan (and its stages, through the same rules) saturates offsets and totals at INT64_MAX:
    a total that would wrap overflows the plan (enable = 0) instead of naming entries past the arrays."""
    for swa in (0, 5):
        recipe = _fused(prefix, extend, swa=swa)
        want, bad = h.run(recipe, "cpu", "torch_ref")
        assert not bad
        total = sum(min(max(p, 0), swa) if swa else max(p, 0) for p in prefix)
        if total > M:
            assert int(want["verify_plan_out.enable"][0]) == 0
            assert int(want["verify_plan_out.verify_num_valid"][0]) == 4
            assert int(want["verify_plan_out.verify_offsets_scratch"][len(prefix)]) == M
        offs = want["write_plan_out.write_offsets"].tolist()
        assert offs == sorted(offs[: len(prefix) + 1]) + offs[len(prefix) + 1 :]  # never decreasing
        _check(recipe, backends)


def test_the_fuzzers_plan_no_longer_writes_out_of_bounds(backends: list[str]) -> None:
    """``prefix_lens=[INT64_MAX, INT64_MAX, 3]``, ``verify_capacity=4``: the Triton plan kernel wrote past its
    outputs (a crash on the interpreter, an illegal address on a GPU); now every backend overflows the plan."""
    from kvcanary.testing import calls

    for backend in ["torch_ref", *backends]:
        kw = calls.plan(bs=3)
        kw["verify_plan_out"] = kc.VerifyPlan.allocate(verify_capacity=4, device="cpu")
        kw["verify_capacity"] = 4
        kw["req_pool_indices"] = torch.tensor([1, 2, 3])
        kw["prefix_lens"] = torch.tensor([M, M, 3])
        kc.launch_canary_plan_kernels(**kw, backend=backend)
        vp = kw["verify_plan_out"]
        assert (int(vp.enable[0]), int(vp.verify_num_valid[0])) == (0, 4), backend
        assert int(vp.verify_offsets_scratch[3]) == M


@pytest.mark.parametrize(("start", "end", "row"), [
    # the exact difference (2**64 - 1) covers every column (a wrapped one, -1, none): request 1 owns them all
    # and writes none (its flat indices are outside flat_in); request 0 covers nothing ([0, start) is empty)
    (-(2**63), M, [-1] * 5),
    (-5, M, [-1] * 5),
    # request 1 covers nothing (end <= start): request 0, [0, M), owns and writes every column
    (M, -(2**63), [100, 101, 102, 103, 104]),
    # request 1 covers columns 0..1 from flat_in[2:4]; request 0 covers the same two: request 1 owns them
    (2, 4, [102, 103, -1, -1, -1]),
])
def test_scatter_widths_use_the_exact_offset_difference(start: int, end: int, row: list[int],
                                                        backends: list[str]) -> None:
    """Requests 0 and 1 both name pool row 0 (offsets 0, start, end); the later one owns the columns it covers,
    even where none of its flat indices is inside flat_in."""

    def build(g: h.Guarded) -> h.Kwargs:
        return {"flat_in": g("flat_in", list(range(100, 110))), "offsets": g("offsets", [0, start, end]),
                "req_pool_indices": g("req_pool_indices", [0, 0]),
                "pool_out": g("pool_out", [-1] * 10, torch.int32, (2, 5))}

    recipe = h.Recipe(Op.SCATTER, build, lambda kw: {"pool_out": kw["pool_out"]}, label=f"scatter {start}..{end}")
    want, bad = h.run(recipe, "cpu", "torch_ref")
    assert not bad and want["pool_out"][0].tolist() == row and want["pool_out"][1].tolist() == [-1] * 5
    _check(recipe, backends)


@pytest.mark.parametrize("ring", [0, 1])
def test_an_empty_or_tiny_ring_counts_every_violation(ring: int, backends: list[str]) -> None:
    """A ring of 0 rows keeps none and counts all (every backend), a ring of 1 keeps the first."""
    ctx = h.ContextDraw(records=torch.zeros(4, 4, dtype=torch.int64), ring=torch.zeros(ring, 8, dtype=torch.int64),
                        write_index=0, slot_counter=0, kernel_counter=0, kind=2, mode=kc.RealKvHashMode.NONE,
                        sources=(), chain_assert=0)

    def build(g: h.Guarded) -> h.Kwargs:
        plan = kc.VerifyPlan(verify_slot_indices=g("s", [1, 2, 9]), verify_expected_tokens=g("t", [-1] * 3),
                             verify_expected_positions=g("p", [5, 5, 5]), verify_prev_slot_indices=g("q", [-1] * 3),
                             verify_num_valid=g("nv", [3], torch.int32), enable=g("en", [1], torch.int32))
        return {"context": ctx.build(g), "plan": plan, "check_verify_expected_token": False}

    recipe = h.Recipe(Op.VERIFY, build, h.context_outputs, 0, ring == 1, label=f"ring {ring}")
    want, bad = h.run(recipe, "cpu", "torch_ref")
    assert not bad and int(want["violation_write_index"][0]) == 3
    _check(recipe, backends)


@SETTINGS
@given(st.integers(-(2**63), 2**63 - 1))
def test_any_int64_launch_tag_is_written_verbatim(kind: int) -> None:
    """kernel_kind outside CanaryLaunchTag is accepted (an engine may add tags): it lands in column 0 of every
    row as given, and decodes as ``unknown(k)``."""
    from kvcanary.violations import tag_name

    ctx = h.ContextDraw(records=torch.zeros(3, 4, dtype=torch.int64), ring=torch.zeros(2, 8, dtype=torch.int64),
                        write_index=0, slot_counter=0, kernel_counter=0, kind=kind, mode=kc.RealKvHashMode.NONE,
                        sources=(), chain_assert=0)

    def build(g: h.Guarded) -> h.Kwargs:
        plan = kc.VerifyPlan(verify_slot_indices=g("s", [7]), verify_expected_tokens=g("t", [-1]),
                             verify_expected_positions=g("p", [0]), verify_prev_slot_indices=g("q", [-1]),
                             verify_num_valid=g("nv", [1], torch.int32), enable=g("en", [1], torch.int32))
        return {"context": ctx.build(g), "plan": plan, "check_verify_expected_token": False}

    recipe = h.Recipe(Op.VERIFY, build, h.context_outputs, 0, label="tag")
    want, bad = h.run(recipe, "cpu", "torch_ref")
    assert not bad and int(want["violation_ring"][0, 0]) == kind
    assert tag_name(kind) == (kc.CanaryLaunchTag(kind).name if 0 <= kind < 12 else f"unknown({kind})")
    assert h.compare(recipe, "cpu", "triton") == []

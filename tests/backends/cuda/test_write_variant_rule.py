"""The cuda write's variant picked per launch (``write.variant_for``): the rule, the launcher's use of it, and a
launch on each side of its boundary against torch_ref.

The rule reads shapes only: variant 7 up to ``DECODE_TOKENS_PER_ROW`` tokens per request row, variant 0 past it.
The launcher's choice is checked with the kernel cache and the launch stubbed (nothing compiles or launches): it
binds the kernel of the rule's variant, decides once when it prepares, and the preload and CI tables hold every
specialization in both variants. The boundary's calls then run through the host emulation (g++) and, on a GPU
(skipped without one), through the cuda backend's public launcher, each against torch_ref.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import kvcanary.manager.forward as forward_mod
import kvcanary_backends.cuda._pack as pack_mod
from kvcanary.launch.write import launch_canary_write_kernel
from kvcanary.manager import CanaryCapacities
from kvcanary.ops.write import WriteLaunch
from kvcanary.registry import REGISTRY, Op, register_backend
from kvcanary.testing import calls
from kvcanary.testing.builders import Call
from kvcanary.testing.parity import check_call
from kvcanary_backends.cuda import write
from kvcanary_backends.cuda._pack import KernelCache
from kvcanary_backends.cuda._specs import EXTENSION_KEYS, KEYS
from tests.backends.cuda import _emu, _support
from tests.manager.graph_parity import pad_eagerly
from tests.manager.world import MAX_LEN, NUM_SLOTS, ROWS, Req, make_world
from tools.scenarios import large_write_call

DECODE, LONG = write.DECODE_VARIANT, write.LONG_VARIANT


# -- the rule -------------------------------------------------------------------------------------------------
def test_the_two_variants_are_the_decode_candidate_and_the_kernel_before_it() -> None:
    assert (DECODE, LONG, write.DECODE_TOKENS_PER_ROW) == (7, 0, 1)


@pytest.mark.parametrize("rows", [1, 3, 4, 64, 1024, 4096])
def test_the_boundary_is_one_token_per_row(rows: int) -> None:
    edge = write.DECODE_TOKENS_PER_ROW * rows
    assert write.variant_for(edge, rows) == DECODE
    assert write.variant_for(edge - 1, rows) == DECODE
    assert write.variant_for(edge + 1, rows) == LONG


@pytest.mark.parametrize(("ntok", "rows", "want"), [
    (1024, 1024, DECODE),  # bench_cuda's decode step, 1024 x 1 token
    (1, 1, DECODE),  # bs 1 x 1
    (8, 256, DECODE),  # a decode step of 8 under a plan sized for 256 rows
    (0, 4, DECODE),  # no tokens: nothing to store either way
    (32768, 1, LONG),  # bench_cuda's 1 x 32 Ki-token chain
    (64 * 512, 64, LONG),  # the head-to-head's 64 x 512
    (64 + 2048, 65, LONG),  # 64 decode requests beside a 2048-token prefill chunk
    (6, 4, LONG),  # bench_cuda's "write: in a CUDA graph" (calls.write: 6 tokens, a plan of 4 rows)
    (4 * 3, 4, LONG),  # speculative decoding, 3 tokens a request
])
def test_shapes_pick_their_variant(ntok: int, rows: int, want: int) -> None:
    assert write.variant_for(ntok, rows) == want


# -- the launcher picks the rule's kernel ---------------------------------------------------------------------
class FakeCompiled:
    max_blocks = 5

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key


@pytest.fixture
def bound(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The keys of the kernels the write's launches fetch from its cache (nothing compiled or launched)."""
    fetched: list[tuple[Any, ...]] = []

    def get(self: KernelCache, device_index: int, key: tuple[Any, ...]) -> FakeCompiled:
        assert self is write.KERNELS
        fetched.append(key)
        return FakeCompiled(key)

    def prepared(compiled: FakeCompiled, device_index: int, shape: tuple[int, ...], args: Any) -> Callable[[], None]:
        return lambda: None

    monkeypatch.setattr(KernelCache, "get", get)
    monkeypatch.setattr(pack_mod, "prepared", prepared)
    return fetched


def _call(tokens: int, rows: int) -> WriteLaunch:
    """A valid write of ``tokens`` tokens over a plan of ``rows`` rows, as the cuda kernel receives it."""
    kw = {**calls.write("cpu", tokens=tokens), "plan": calls.write_plan("cpu", cap=rows)}
    return WriteLaunch.model_construct(**kw)


@pytest.mark.parametrize(("tokens", "rows"), [(4, 4), (1, 4), (5, 4), (6, 4), (64, 2)])
def test_prepare_binds_the_rules_kernel(tokens: int, rows: int, bound: list[tuple[Any, ...]]) -> None:
    call = _call(tokens, rows)
    want = write.variant_for(tokens, rows)
    write.prepare(call)
    impl = Op.WRITE.kernels["cuda"].impl
    assert callable(impl)
    impl(call)  # the attached kernel: prepare(call)()
    assert [k[-1] for k in bound] == [want, want]
    assert bound[0][:-1] == bound[1][:-1] and len(bound[0]) == 8


def test_the_benchmarks_six_token_write_runs_the_long_variant(bound: list[tuple[Any, ...]]) -> None:
    """bench_cuda's "write: in a CUDA graph" launches calls.write: 6 tokens over a plan of 4 rows (none valid),
    not 6 requests x 1 token: more tokens than rows, so variant 0 (whose fold blocks exit at once past the valid
    requests, where variant 7's wait for their early strips)."""
    call = WriteLaunch.model_construct(**calls.write("cpu"))
    assert (call.input_ids.shape[0], call.plan.write_seed_slot_indices.shape[0]) == (6, 4)
    write.prepare(call)
    assert bound[-1][-1] == LONG


def test_the_choice_is_made_once_when_the_launch_is_prepared(bound: list[tuple[Any, ...]],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    picks: list[tuple[int, int]] = []
    rule = write.variant_for

    def counted(ntok: int, rows: int) -> int:
        picks.append((ntok, rows))
        return rule(ntok, rows)

    monkeypatch.setattr(write, "variant_for", counted)
    run = write.prepare(_call(3, 4))
    for _ in range(3):
        run()
    assert picks == [(3, 4)] and len(bound) == 1


def test_prepare_variant_overrides_the_rule(bound: list[tuple[Any, ...]]) -> None:
    call = _call(64, 2)
    for variant in write.VARIANTS:
        write.prepare_variant(call, variant)
        assert bound[-1][-1] == variant
    write.prepare(call)
    assert bound[-1][-1] == LONG


def test_every_specialization_is_preloaded_and_compiled_in_both_variants() -> None:
    """A launch of either shape finds its kernel loaded before a capture (preload), and CI compiles both."""
    for table in (KEYS, EXTENSION_KEYS):
        cache, keys = table[Op.WRITE]
        assert cache is write.KERNELS
        by_variant = {v: {k[:-1] for k in keys if k[-1] == v} for v in (LONG, DECODE)}
        assert by_variant[LONG] and by_variant[LONG] == by_variant[DECODE]
        assert {k[-1] for k in keys} == {LONG, DECODE}


# -- a launch on each side of the boundary, against torch_ref -------------------------------------------------
def _tokens(call: Call, n: int) -> Call:
    """``call`` with its token tensors cut to their first ``n`` (past the plan's total: padding)."""
    def make(dev: Any) -> dict[str, Any]:
        kw = call.make(dev)
        for name in ("input_ids", "positions", "out_cache_loc", "expected_input_tokens", "expected_input_positions"):
            if kw.get(name) is not None:
                kw[name] = kw[name][:n].contiguous()
        return kw

    return dataclasses.replace(call, make=make, label=f"{call.label} {n} tokens")


def _decode(seed: int, requests: int, extra: int, **kw: Any) -> Call:
    """``requests`` one-token requests with ``extra`` padding tokens after them."""
    return _tokens(large_write_call(seed, requests=requests, length=1, **kw), requests + extra)


EDGE: dict[str, tuple[Callable[[], Call], int]] = {
    "decode at the boundary, NONE": (lambda: _decode(51, 13, 0), DECODE),
    "decode at the boundary, PARTIAL x2": (lambda: _decode(52, 9, 0, sources=2, mode=1), DECODE),
    "decode at the boundary, PARTIAL x4 hostile": (lambda: _decode(53, 12, 0, sources=4, mode=1, hostile=True),
                                                   DECODE),
    "decode at the boundary, ALL x1 assert": (lambda: _decode(54, 8, 0, sources=1, mode=2, assert_inputs=True),
                                              DECODE),
    "one token past it, NONE": (lambda: _decode(55, 13, 1), LONG),
    "one token past it, PARTIAL x2": (lambda: _decode(56, 9, 1, sources=2, mode=1), LONG),
    "prefill 3 x 70, PARTIAL x3 assert": (lambda: large_write_call(57, requests=3, length=70, sources=3, mode=1,
                                                                   assert_inputs=True), LONG),
    "prefill 2 x 90, ALL x2 hostile": (lambda: large_write_call(58, requests=2, length=90, sources=2, mode=2,
                                                                hostile=True), LONG),
    "varied 10 x 40, NONE": (lambda: large_write_call(59, requests=10, length=40, vary=True), LONG),
}


@pytest.mark.parametrize("name", list(EDGE))
def test_the_boundary_calls_sit_where_they_say(name: str) -> None:
    make, want = EDGE[name]
    assert write.pack(_emu.call_of(write, make().make("cpu")))[0][-1] == want


@pytest.fixture
def emulated() -> Iterator[str]:
    register_backend(_emu.BACKEND, replace=True)
    yield _emu.BACKEND.name
    REGISTRY.unregister(_emu.BACKEND.name)


@pytest.mark.skipif(_emu.compiler() is None, reason="no C++ compiler (g++) for the host emulation")
@pytest.mark.parametrize("name", list(EDGE))
def test_emulated_launch_on_each_side_matches_the_reference(name: str, emulated: str) -> None:
    assert check_call(EDGE[name][0](), "cpu", emulated) == []


_GPU_SKIP = _support.cuda_skip_reason()


@pytest.mark.gpu
@pytest.mark.skipif(_GPU_SKIP is not None, reason=f"cuda backend unavailable: {_GPU_SKIP}")
@pytest.mark.parametrize("name", list(EDGE))
def test_gpu_launch_on_each_side_matches_the_reference(name: str) -> None:
    assert check_call(EDGE[name][0](), "cuda", "cuda") == []


# -- the shapes the manager hands the rule --------------------------------------------------------------------
def test_a_bucketed_decode_step_is_decode_shaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The manager's padded forward (its own graphs' path) writes a decode step of 5 one-token rows with its plan
    of ``write_req_capacity`` rows (6 here, not a power of two): the tokens are padded to their own rung (8), so
    the launch has more tokens than plan rows and the rule picks the long variant for a decode step."""
    seen: list[tuple[int, int]] = []

    def spy(**kw: Any) -> None:
        seen.append((int(kw["input_ids"].shape[0]), int(kw["plan"].write_seed_slot_indices.shape[0])))
        launch_canary_write_kernel(**kw)

    monkeypatch.setattr(forward_mod, "launch_canary_write_kernel", spy)
    caps = CanaryCapacities.from_engine(pool_slot_count=NUM_SLOTS, max_batch_size=5, req_rows=ROWS,
                                        max_tokens_per_forward=MAX_LEN, max_context_len=MAX_LEN)  # row 0 + 5
    w = make_world(verify_token=False, capacities=caps)
    assert w.manager.capacities.write_req_capacity == 6
    pad_eagerly(w.manager)
    reqs = [Req(r, list(range(100 * r, 100 * r + 8)), [10 * r]) for r in range(1, 6)]
    w.forward([(q, 0, 1) for q in reqs])  # five one-token requests: a decode-shaped step
    assert seen and all(ntok >= 5 for ntok, _ in seen)
    assert [write.variant_for(ntok, rows) for ntok, rows in seen] == [DECODE] * len(seen), seen

"""Every message SGLang's kv-canary raises is raised, word for word, for its condition, before anything runs.

The kept texts are listed in docs/compatibility.md, Error messages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch

import kvcanary as kc
from kvcanary.testing import calls

Mut = Callable[[dict[str, Any]], None]


def ctx_replace(**over: Any) -> Mut:
    def mutate(kw: dict[str, Any]) -> None:
        kw["context"] = dataclasses.replace(kw["context"], **over)

    return mutate


def plan_replace(key: str, **over: Any) -> Mut:
    def mutate(kw: dict[str, Any]) -> None:
        kw[key] = dataclasses.replace(kw[key], **over)

    return mutate


def setitem(**over: Any) -> Mut:
    def mutate(kw: dict[str, Any]) -> None:
        kw.update(over)

    return mutate


def invalid_as_built(kw: dict[str, Any]) -> None:
    """No mutation: the base call itself breaks the rule (sizes that only a fresh call can have)."""


def strided(n: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.zeros(2 * n, dtype=dtype)[::2]


def five_sources() -> tuple[kc.RealKvSource, ...]:
    return tuple(calls.source() for _ in range(5))


def narrow_source() -> tuple[kc.RealKvSource, ...]:
    t = torch.zeros(4, 64, dtype=torch.uint8)
    return (kc.RealKvSource(tensor=t, page_size=4, num_bytes_per_token=32, read_bytes=32),)


CASES: list[tuple[str, Callable[..., None], Callable[[], dict[str, Any]], Mut, str]] = [
    # verify
    ("verify/sources", kc.launch_canary_verify_kernel, calls.verify, ctx_replace(real_kv_sources=five_sources()),
     "kv-canary: at most 4 RealKvSource entries supported by the CUDA ABI, got 5"),
    ("verify/canary_buf", kc.launch_canary_verify_kernel, calls.verify,
     ctx_replace(canary_buf=torch.zeros(16, 64, dtype=torch.uint8)[:, ::2]), "kv-canary: canary_buf must be contiguous"),
    ("verify/plan.slots", kc.launch_canary_verify_kernel, calls.verify,
     plan_replace("plan", verify_slot_indices=strided(8)), "kv-canary: plan.verify_slot_indices must be contiguous"),
    ("verify/plan.tokens", kc.launch_canary_verify_kernel, calls.verify,
     plan_replace("plan", verify_expected_tokens=strided(8)), "kv-canary: plan.verify_expected_tokens must be contiguous"),
    ("verify/plan.positions", kc.launch_canary_verify_kernel, calls.verify,
     plan_replace("plan", verify_expected_positions=strided(8)),
     "kv-canary: plan.verify_expected_positions must be contiguous"),
    ("verify/plan.prev", kc.launch_canary_verify_kernel, calls.verify,
     plan_replace("plan", verify_prev_slot_indices=strided(8)),
     "kv-canary: plan.verify_prev_slot_indices must be contiguous"),
    ("verify/ring", kc.launch_canary_verify_kernel, calls.verify,
     ctx_replace(violation_ring=torch.zeros(8, 16, dtype=torch.int64)[:, ::2]), "kv-canary: violation_ring must be contiguous"),
    ("verify/source contiguity", kc.launch_canary_verify_kernel, calls.verify,
     ctx_replace(real_kv_sources=(kc.RealKvSource(tensor=torch.zeros(16, 128, dtype=torch.uint8)[:, :64],
                                                  page_size=1, num_bytes_per_token=64, read_bytes=64),)),
     "kv-canary: real_kv_sources[0].tensor must be contiguous"),
    ("verify/source 2-D", kc.launch_canary_verify_kernel, calls.verify,
     ctx_replace(real_kv_sources=(kc.RealKvSource(tensor=torch.zeros(16, 4, 16, dtype=torch.uint8), page_size=1,
                                                  num_bytes_per_token=64, read_bytes=64),)),
     "kv-canary: real_kv_sources[0].tensor (viewed as uint8) must be 2-D, got 3-D"),
    ("verify/stride", kc.launch_canary_verify_kernel, calls.verify,
     ctx_replace(canary_buf=torch.zeros(16, 16, dtype=torch.uint8)),
     "kv-canary: canary_buf slot stride must hold at least 4 int64 fields, got 2"),
    ("verify/narrow", kc.launch_canary_verify_kernel, calls.verify, ctx_replace(real_kv_sources=narrow_source()),
     "kv-canary: RealKvSource row is too narrow for its slot layout: dim-1 is 64 bytes but page_size=4 x "
     "num_bytes_per_token=32 needs 128"),
    # write
    ("write/sources", kc.launch_canary_write_kernel, calls.write, ctx_replace(real_kv_sources=five_sources()),
     "kv-canary: at most 4 RealKvSource entries supported by the CUDA ABI, got 5"),
    ("write/offsets", kc.launch_canary_write_kernel, calls.write, plan_replace("plan", write_offsets=strided(5)),
     "kv-canary: plan.write_offsets must be contiguous"),
    ("write/seeds", kc.launch_canary_write_kernel, calls.write,
     plan_replace("plan", write_seed_slot_indices=strided(4)), "kv-canary: plan.write_seed_slot_indices must be contiguous"),
    ("write/input_ids", kc.launch_canary_write_kernel, calls.write, setitem(input_ids=strided(6)),
     "kv-canary: input_ids must be contiguous"),
    ("write/out_cache_loc", kc.launch_canary_write_kernel, calls.write, setitem(out_cache_loc=strided(6)),
     "kv-canary: out_cache_loc must be contiguous"),
    ("write/required", kc.launch_canary_write_kernel, calls.write, setitem(enable_write_input_assert=True),
     "kv-canary: expected input tensors are required when enable_write_input_assert=True"),
    ("write/required one", kc.launch_canary_write_kernel, calls.write,
     setitem(enable_write_input_assert=True, expected_input_tokens=torch.zeros(6, dtype=torch.int64)),
     "kv-canary: expected input tensors are required when enable_write_input_assert=True"),
    ("write/forbidden", kc.launch_canary_write_kernel, calls.write,
     setitem(expected_input_positions=torch.zeros(6, dtype=torch.int64)),
     "kv-canary: expected input tensors must be None when enable_write_input_assert=False"),
    ("write/expected contiguity", kc.launch_canary_write_kernel, lambda: calls.write(assert_inputs=True),
     setitem(expected_input_tokens=strided(6)), "kv-canary: expected_input_tokens must be contiguous"),
    ("write/stride", kc.launch_canary_write_kernel, calls.write,
     ctx_replace(canary_buf=torch.zeros(16, 16, dtype=torch.uint8)),
     "kv-canary: canary_buf slot stride must hold at least 4 int64 fields, got 2"),
    # plan
    ("plan/lut", kc.launch_canary_plan_kernels, lambda: calls.plan(swa=4), setitem(full_to_swa_index_mapping=None),
     "kv-canary: launch_canary_plan_kernels requires full_to_swa_index_mapping when swa_window_size > 0"),
    ("plan/bs", kc.launch_canary_plan_kernels, lambda: {**calls.plan(bs=4097), "write_plan_out": calls.write_plan(cap=4097)},
     invalid_as_built, "kv-canary: launch_canary_plan_kernels supports at most bs=4096 reqs per launch, got bs=4097. "
     "Bump _PLAN_BS_BLOCK_SIZE if real workloads need this."),
    ("plan/capacity", kc.launch_canary_plan_kernels, calls.plan, setitem(verify_capacity=7),
     "kv-canary: launch_canary_plan_kernels_torch_reference verify_capacity=7 does not match "
     "verify_plan_out.verify_slot_indices.shape[0]=8"),
    ("plan/valid lens", kc.launch_canary_plan_kernels, lambda: calls.plan(pool=True),
     setitem(req_to_verify_expected_tokens_valid_lens=None),
     "kv-canary: launch_canary_plan_kernels_torch_reference requires req_to_verify_expected_tokens_valid_lens when "
     "req_to_verify_expected_tokens is set"),
    ("plan/dtype", kc.launch_canary_plan_kernels, calls.plan, setitem(req_to_token=torch.zeros(4, 8, dtype=torch.int64)),
     "kv-canary: req_to_token must have dtype torch.int32, got torch.int64"),
    ("plan/1-D", kc.launch_canary_plan_kernels, calls.plan, setitem(prefix_lens=torch.zeros(3, 1, dtype=torch.int64)),
     "kv-canary: prefix_lens must be 1-D, got shape (3, 1)"),
    ("plan/2-D", kc.launch_canary_plan_kernels, calls.plan, setitem(req_to_token=torch.zeros(32, dtype=torch.int32)),
     "kv-canary: req_to_token must be 2-D, got shape (32,)"),
    ("plan/length", kc.launch_canary_plan_kernels, calls.plan, setitem(extend_seq_lens=torch.zeros(2, dtype=torch.int64)),
     "kv-canary: extend_seq_lens length must be 3, got 2"),
    ("plan/device", kc.launch_canary_plan_kernels, calls.plan,
     setitem(req_to_token=torch.zeros(4, 8, dtype=torch.int32, device="meta")),
     "kv-canary: req_to_token must be on verify_plan_out.verify_slot_indices's device cpu, got meta"),
    # plan entries
    ("entries/valid lens", kc.launch_plan_entries_kernel, lambda: calls.plan_entries(pool=True),
     setitem(req_to_verify_expected_tokens_valid_lens=None),
     "kv-canary: launch_plan_entries_kernel requires req_to_verify_expected_tokens_valid_lens when "
     "req_to_verify_expected_tokens is set"),
    ("entries/scratch", kc.launch_plan_entries_kernel, calls.plan_entries,
     setitem(verify_offsets_scratch=torch.zeros(3, dtype=torch.int64)),
     "kv-canary: verify_offsets_scratch length must be >= 4, got 3"),
    # plan offsets (SGLang's _validate_offsets_kernel_inputs)
    ("offsets/contiguous", kc.launch_plan_offsets_kernel, calls.plan_offsets, setitem(req_pool_indices=strided(3)),
     "kv-canary: req_pool_indices must be contiguous"),
    ("offsets/lut contiguous", kc.launch_plan_offsets_kernel, calls.plan_offsets,
     setitem(swa_window_size=2, full_to_swa_index_mapping=strided(9)), "kv-canary: lut_tensor must be contiguous"),
    ("offsets/dtype", kc.launch_plan_offsets_kernel, calls.plan_offsets,
     setitem(out_verify_enable=torch.zeros(1, dtype=torch.int64)),
     "kv-canary: out_verify_enable must have dtype torch.int32, got torch.int64"),
    ("offsets/bs", kc.launch_plan_offsets_kernel, lambda: calls.plan_offsets(bs=4097, cap=4097), invalid_as_built,
     "kv-canary: offsets kernel bs must be in [0, 4096], got 4097"),
    ("offsets/write_offsets_len", kc.launch_plan_offsets_kernel, calls.plan_offsets,
     setitem(out_write_offsets=torch.zeros(0, dtype=torch.int64), out_write_seed_slot_indices=torch.zeros(0, dtype=torch.int64),
             req_pool_indices=torch.zeros(0, dtype=torch.int64), prefix_lens=torch.zeros(0, dtype=torch.int64),
             extend_seq_lens=torch.zeros(0, dtype=torch.int64)),
     "kv-canary: write_offsets_len must be positive, got 0"),
    ("offsets/verify_capacity", kc.launch_plan_offsets_kernel, calls.plan_offsets, setitem(verify_capacity=-1),
     "kv-canary: verify_capacity must be non-negative, got -1"),
    ("offsets/lut min length", kc.launch_plan_offsets_kernel, calls.plan_offsets,
     setitem(swa_window_size=3, full_to_swa_index_mapping=torch.zeros(0, dtype=torch.int64)),
     "kv-canary: lut_tensor length must be >= 1, got 0"),
    ("offsets/scratch", kc.launch_plan_offsets_kernel, calls.plan_offsets,
     setitem(out_verify_offsets_scratch=torch.zeros(4096, dtype=torch.int64)),
     "kv-canary: out_verify_offsets_scratch length must be >= 4097, got 4096"),
    ("offsets/seed length", kc.launch_plan_offsets_kernel, calls.plan_offsets,
     setitem(out_write_seed_slot_indices=torch.zeros(5, dtype=torch.int64)),
     "kv-canary: write_offsets_len must equal write_req_capacity + 1, got 5 and 5"),
    ("offsets/bs>cap", kc.launch_plan_offsets_kernel, lambda: calls.plan_offsets(bs=3, cap=2), invalid_as_built,
     "kv-canary: bs=3 exceeds write_req_capacity=2"),
    ("offsets/2-D", kc.launch_plan_offsets_kernel, calls.plan_offsets,
     setitem(req_to_token=torch.zeros(32, dtype=torch.int32)), "kv-canary: req_to_token must be 2-D, got shape (32,)"),
    ("offsets/length", kc.launch_plan_offsets_kernel, calls.plan_offsets,
     setitem(out_verify_num_valid=torch.zeros(2, dtype=torch.int32)), "kv-canary: out_verify_num_valid length must be 1, got 2"),
    ("offsets/device", kc.launch_plan_offsets_kernel, calls.plan_offsets,
     setitem(prefix_lens=torch.zeros(3, dtype=torch.int64, device="meta")),
     "kv-canary: prefix_lens must be on out_verify_offsets_scratch's device cpu, got meta"),
    # scatter
    ("scatter/1-D", kc.launch_scatter_req_token_ids_kernel, calls.scatter, setitem(flat_in=torch.zeros(5, 1, dtype=torch.int64)),
     "kv-canary: scatter_req_token_ids flat_in must be 1-D, got shape (5, 1)"),
    ("scatter/offsets 1-D", kc.launch_scatter_req_token_ids_kernel, calls.scatter,
     setitem(offsets=torch.zeros(3, 1, dtype=torch.int64)), "kv-canary: scatter_req_token_ids offsets must be 1-D, got shape (3, 1)"),
    ("scatter/rpi 1-D", kc.launch_scatter_req_token_ids_kernel, calls.scatter,
     setitem(req_pool_indices=torch.zeros(2, 1, dtype=torch.int64)),
     "kv-canary: scatter_req_token_ids req_pool_indices must be 1-D, got shape (2, 1)"),
    ("scatter/pool 2-D", kc.launch_scatter_req_token_ids_kernel, calls.scatter, setitem(pool_out=torch.zeros(24, dtype=torch.int32)),
     "kv-canary: scatter_req_token_ids pool_out must be 2-D, got shape (24,)"),
    ("scatter/offsets len", kc.launch_scatter_req_token_ids_kernel, calls.scatter,
     setitem(offsets=torch.zeros(4, dtype=torch.int64)), "kv-canary: scatter_req_token_ids offsets length 4 != bs+1 (3)"),
]

TYPE_CASES: list[tuple[str, Mut, str]] = [
    ("flat_in", setitem(flat_in=torch.zeros(5, dtype=torch.int32)), "kv-canary: scatter_req_token_ids flat_in must be int64, got torch.int32"),
    ("offsets", setitem(offsets=torch.zeros(3, dtype=torch.int32)), "kv-canary: scatter_req_token_ids offsets must be int64, got torch.int32"),
    ("req_pool_indices", setitem(req_pool_indices=torch.zeros(2, dtype=torch.int32)),
     "kv-canary: scatter_req_token_ids req_pool_indices must be int64, got torch.int32"),
    ("pool_out", setitem(pool_out=torch.zeros(3, 8, dtype=torch.int64)), "kv-canary: scatter_req_token_ids pool_out must be int32, got torch.int64"),
]


def _snapshot(kw: dict[str, Any]) -> list[torch.Tensor]:
    out = []
    for v in kw.values():
        if isinstance(v, torch.Tensor) and v.device.type != "meta":
            out.append(v.clone())
        elif dataclasses.is_dataclass(v):
            out += [f.clone() for f in vars(v).values() if isinstance(f, torch.Tensor) and f.device.type != "meta"] \
                if hasattr(v, "__dict__") else []
    return out


@pytest.mark.parametrize(("name", "launch", "base", "mutate", "message"), CASES, ids=[c[0] for c in CASES])
def test_reference_message(name: str, launch: Callable[..., None], base: Callable[[], dict[str, Any]], mutate: Mut,
                           message: str) -> None:
    kw = base()
    if mutate is not invalid_as_built:
        launch(**kw)  # the unmutated call is valid
        kw = base()
    mutate(kw)
    before = _snapshot(kw)
    with pytest.raises(kc.ContractError) as info:
        launch(**kw)
    assert str(info.value).splitlines()[0] == message
    assert info.value.code.startswith("KVC-") and "?" not in info.value.code
    assert f"kvcanary explain {info.value.code}" in str(info.value).splitlines()[1]
    assert all(torch.equal(a, b) for a, b in zip(before, _snapshot(kw), strict=True)), "nothing is modified"


@pytest.mark.parametrize(("name", "mutate", "message"), TYPE_CASES, ids=[c[0] for c in TYPE_CASES])
def test_scatter_dtype_errors_are_type_errors(name: str, mutate: Mut, message: str) -> None:
    kw = calls.scatter()
    mutate(kw)
    with pytest.raises(TypeError) as info:
        kc.launch_scatter_req_token_ids_kernel(**kw)
    assert isinstance(info.value, kc.ContractError)
    assert str(info.value).splitlines()[0] == message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"page_size": 0}, "kv-canary: RealKvSource.page_size must be >= 1, got 0"),
        ({"num_bytes_per_token": 24}, "kv-canary: RealKvSource.num_bytes_per_token must be a positive multiple of 16, got 24"),
        ({"num_bytes_per_token": 0}, "kv-canary: RealKvSource.num_bytes_per_token must be a positive multiple of 16, got 0"),
        ({"read_bytes": 0}, "kv-canary: RealKvSource.read_bytes must be a positive multiple of 16 in "
                            "(0, num_bytes_per_token=64], got 0"),
        ({"read_bytes": 80}, "kv-canary: RealKvSource.read_bytes must be a positive multiple of 16 in "
                             "(0, num_bytes_per_token=64], got 80"),
        ({"read_bytes": 24}, "kv-canary: RealKvSource.read_bytes must be a positive multiple of 16 in "
                             "(0, num_bytes_per_token=64], got 24"),
        ({"tensor": torch.zeros(64, dtype=torch.uint8)}, "kv-canary: RealKvSource.tensor must be at least 2-D, got shape (64,)"),
        ({"tensor": torch.zeros(4, 40, dtype=torch.uint8)[:, :36]},
         "kv-canary: RealKvSource.tensor row stride must be a multiple of 16 bytes, got 40 bytes (shape=(4, 36), "
         "strides=(40, 1), dtype=torch.uint8)"),
    ],
)
def test_real_kv_source_messages_in_order(kwargs: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"tensor": torch.zeros(4, 64, dtype=torch.uint8), "page_size": 1,
                            "num_bytes_per_token": 64, "read_bytes": 64}
    base.update(kwargs)
    with pytest.raises(kc.ContractError) as info:
        kc.RealKvSource(**base)
    assert str(info.value).splitlines()[0] == message


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: kc.VerifyPlan.allocate(verify_capacity=0, device="cpu"),
         "kv-canary: VerifyPlan verify_capacity must be positive, got 0"),
        (lambda: kc.WritePlan.allocate(write_req_capacity=-3, device="cpu"),
         "kv-canary: WritePlan write_req_capacity must be positive, got -3"),
        (lambda: kc.ViolationLog.allocate(ring_capacity=0, device="cpu"),
         "kv-canary: ViolationLog ring_capacity must be positive, got 0"),
    ],
)
def test_allocation_messages(make: Callable[[], object], message: str) -> None:
    with pytest.raises(kc.ContractError) as info:
        make()
    assert str(info.value).splitlines()[0] == message

"""Host cost of a launch: kvcanary's contract check + registry dispatch, against hand-written checks.

For each launcher, the same call is timed two ways, with a do-nothing backend so only host work counts:
- kvcanary: the public launcher (generated checker, then ``REGISTRY.run`` to the no-op backend);
- hand-written: plain ``if`` checks in SGLang's style (one helper per check kind) doing the same checks on
  the same tensors, then a direct call of the no-op.
The floor is the hand-written figure; the goal is a ratio of at most 1.2x. The calls are
``kvcanary.testing.calls``' small valid ones, built on ``--device``; timing and report are benchmarks/timing.py
and benchmarks/report.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

import kvcanary as kc
from benchmarks import timing
from benchmarks.report import Report, machine
from kvcanary.registry import REGISTRY
from kvcanary.testing import calls


def _noop(*args: object, **kwargs: object) -> None:
    """The do-nothing backend's implementation of every operation (it receives the call object)."""


NOOP = kc.Backend("noop", "does nothing (host-overhead benchmark)",
                  {op: kc.OpSupport(f"{__name__}:_noop", {"*": 0}, capture_safe=True) for op in kc.Op})


# -- hand-written checks (SGLang style) ---------------------------------------------------------------------
def _contig(t: torch.Tensor, name: str) -> None:
    if not t.is_contiguous():
        raise ValueError(f"kv-canary: {name} must be contiguous")


def _dtype(t: torch.Tensor, name: str, dtype: torch.dtype) -> None:
    if t.dtype is not dtype:
        raise ValueError(f"kv-canary: {name} must have dtype {dtype}, got {t.dtype}")


def _shape(t: torch.Tensor, name: str, *sizes: int) -> None:
    if t.dim() != len(sizes):
        raise ValueError(f"kv-canary: {name} must be {len(sizes)}-D, got shape {tuple(t.shape)}")
    for i, s in enumerate(sizes):
        if s >= 0 and t.shape[i] != s:
            raise ValueError(f"kv-canary: {name} dim {i} must be {s}, got {t.shape[i]}")


def _device(t: torch.Tensor, name: str, dev: torch.device) -> None:
    if t.device != dev:
        raise ValueError(f"kv-canary: {name} must be on {dev}, got {t.device}")


def _full(t: torch.Tensor, name: str, dtype: torch.dtype, dev: torch.device, *sizes: int,
          contiguous: bool = True) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"kv-canary: {name} must be a torch.Tensor")
    if contiguous:
        _contig(t, name)
    _dtype(t, name, dtype)
    _shape(t, name, *sizes)
    _device(t, name, dev)


def _hand_context(ctx: kc.VerifyOrWriteContext) -> torch.device:
    if not isinstance(ctx, kc.VerifyOrWriteContext):
        raise ValueError("kv-canary: context must be a VerifyOrWriteContext")
    if len(ctx.real_kv_sources) > kc.MAX_REAL_KV_SOURCES:
        raise ValueError("kv-canary: at most 4 RealKvSource entries supported by the CUDA ABI")
    buf = ctx.canary_buf
    dev = buf.device
    _full(buf, "canary_buf", torch.uint8, dev, -1, -1)
    _full(ctx.violation_ring, "violation_ring", torch.int64, dev, -1, 8)
    _full(ctx.violation_write_index, "violation_write_index", torch.int32, dev, 1, contiguous=False)
    _full(ctx.slot_run_counter, "slot_run_counter", torch.int64, dev, 1, contiguous=False)
    _full(ctx.kernel_run_counter, "kernel_run_counter", torch.int64, dev, 1, contiguous=False)
    _full(ctx.enable_chain_position_assert, "enable_chain_position_assert", torch.int32, dev, 1, contiguous=False)
    if not isinstance(ctx.kernel_kind, int) or ctx.real_kv_hash_mode not in (0, 1, 2):
        raise ValueError("kv-canary: bad kernel_kind or real_kv_hash_mode")
    stride = buf.shape[1]
    if stride < 32 or stride % 8 or buf.data_ptr() % 16:
        raise ValueError("kv-canary: canary_buf slot stride must hold at least 4 int64 fields")
    for i, s in enumerate(ctx.real_kv_sources):
        t = s.tensor
        _contig(t, f"real_kv_sources[{i}].tensor")
        if t.dim() != 2:
            raise ValueError(f"kv-canary: real_kv_sources[{i}].tensor (viewed as uint8) must be 2-D")
        if t.shape[1] * t.element_size() < s.page_size * s.num_bytes_per_token or t.data_ptr() % 16:
            raise ValueError("kv-canary: RealKvSource row is too narrow for its slot layout")
        _device(t, f"real_kv_sources[{i}].tensor", dev)
    return dev


def _hand_verify_plan(p: kc.VerifyPlan, dev: torch.device, prefix: str) -> int:
    cap = p.verify_slot_indices.shape[0]
    for name in ("verify_slot_indices", "verify_expected_tokens", "verify_expected_positions",
                 "verify_prev_slot_indices"):
        _full(getattr(p, name), prefix + name, torch.int64, dev, cap)
    _full(p.verify_num_valid, prefix + "verify_num_valid", torch.int32, dev, 1, contiguous=False)
    _full(p.enable, prefix + "enable", torch.int32, dev, 1, contiguous=False)
    if p.verify_offsets_scratch is not None:
        _full(p.verify_offsets_scratch, prefix + "verify_offsets_scratch", torch.int64, dev, -1)
        if p.verify_offsets_scratch.shape[0] < kc.PLAN_OFFSETS_SCRATCH_LEN:
            raise ValueError("kv-canary: scratch too short")
    return cap


def _hand_write_plan(p: kc.WritePlan, dev: torch.device, prefix: str) -> int:
    cap = p.write_seed_slot_indices.shape[0]
    _full(p.write_seed_slot_indices, prefix + "write_seed_slot_indices", torch.int64, dev, cap)
    _full(p.write_offsets, prefix + "write_offsets", torch.int64, dev, cap + 1)
    _full(p.write_num_valid_reqs, prefix + "write_num_valid_reqs", torch.int32, dev, 1, contiguous=False)
    return cap


def hand_verify(*, context: kc.VerifyOrWriteContext, plan: kc.VerifyPlan, check_verify_expected_token: bool) -> None:
    dev = _hand_context(context)
    _hand_verify_plan(plan, dev, "plan.")
    if not isinstance(check_verify_expected_token, bool):
        raise ValueError("kv-canary: check_verify_expected_token must be bool")
    _noop()


def hand_write(*, context: kc.VerifyOrWriteContext, plan: kc.WritePlan, input_ids: torch.Tensor,
               positions: torch.Tensor, out_cache_loc: torch.Tensor, enable_write_input_assert: bool,
               expected_input_tokens: torch.Tensor | None, expected_input_positions: torch.Tensor | None) -> None:
    dev = _hand_context(context)
    _hand_write_plan(plan, dev, "plan.")
    n = input_ids.shape[0]
    for t, name in ((input_ids, "input_ids"), (positions, "positions"), (out_cache_loc, "out_cache_loc")):
        _full(t, name, torch.int64, dev, n)
    if enable_write_input_assert:
        if expected_input_tokens is None or expected_input_positions is None:
            raise ValueError("kv-canary: expected input tensors are required when enable_write_input_assert=True")
        _full(expected_input_tokens, "expected_input_tokens", torch.int64, dev, n)
        _full(expected_input_positions, "expected_input_positions", torch.int64, dev, n)
    elif expected_input_tokens is not None or expected_input_positions is not None:
        raise ValueError("kv-canary: expected input tensors must be None when enable_write_input_assert=False")
    _noop()


def _hand_plan_inputs(rpi: torch.Tensor, prefix: torch.Tensor, r2t: torch.Tensor, lut: torch.Tensor | None,
                      pool: torch.Tensor | None, valid: torch.Tensor | None, swa: int, dev: torch.device,
                      launcher: str) -> int:
    if swa > 0 and lut is None:
        raise ValueError(f"kv-canary: {launcher} requires full_to_swa_index_mapping when swa_window_size > 0")
    if pool is not None and valid is None:
        raise ValueError(f"kv-canary: {launcher} requires req_to_verify_expected_tokens_valid_lens")
    bs = rpi.shape[0]
    _full(rpi, "req_pool_indices", torch.int64, dev, bs)
    _full(prefix, "prefix_lens", torch.int64, dev, bs)
    _full(r2t, "req_to_token", torch.int32, dev, -1, -1)
    if lut is not None:
        _full(lut, "full_to_swa_index_mapping", torch.int64, dev, -1)
        if lut.shape[0] < 1:
            raise ValueError("kv-canary: lut too short")
    if pool is not None:
        _full(pool, "req_to_verify_expected_tokens", torch.int32, dev, -1, -1)
    if valid is not None:
        _full(valid, "req_to_verify_expected_tokens_valid_lens", torch.int64, dev, bs)
    if swa < 0 or bs > kc.PLAN_BS_BLOCK_SIZE:
        raise ValueError("kv-canary: bad window or bs")
    return bs


def hand_plan(*, verify_plan_out: kc.VerifyPlan, write_plan_out: kc.WritePlan, req_pool_indices: torch.Tensor,
              prefix_lens: torch.Tensor, extend_seq_lens: torch.Tensor, req_to_token: torch.Tensor,
              swa_window_size: int, full_to_swa_index_mapping: torch.Tensor | None, verify_capacity: int,
              req_to_verify_expected_tokens: torch.Tensor | None,
              req_to_verify_expected_tokens_valid_lens: torch.Tensor | None,
              kv_token_id_vs_position_offset: int) -> None:
    dev = verify_plan_out.verify_slot_indices.device
    cap = _hand_verify_plan(verify_plan_out, dev, "verify_plan_out.")
    wcap = _hand_write_plan(write_plan_out, dev, "write_plan_out.")
    bs = _hand_plan_inputs(req_pool_indices, prefix_lens, req_to_token, full_to_swa_index_mapping,
                           req_to_verify_expected_tokens, req_to_verify_expected_tokens_valid_lens, swa_window_size,
                           dev, "launch_canary_plan_kernels")
    _full(extend_seq_lens, "extend_seq_lens", torch.int64, dev, bs)
    if verify_capacity != cap or bs > wcap:
        raise ValueError("kv-canary: capacity mismatch")
    if not isinstance(kv_token_id_vs_position_offset, int):
        raise ValueError("kv-canary: kv_token_id_vs_position_offset must be int")
    _noop()


def hand_plan_offsets(*, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor, extend_seq_lens: torch.Tensor,
                      req_to_token: torch.Tensor, full_to_swa_index_mapping: torch.Tensor | None,
                      out_verify_offsets_scratch: torch.Tensor, out_write_offsets: torch.Tensor,
                      out_write_seed_slot_indices: torch.Tensor, out_verify_num_valid: torch.Tensor,
                      out_verify_enable: torch.Tensor, out_write_num_valid_reqs: torch.Tensor, swa_window_size: int,
                      verify_capacity: int) -> None:
    dev = out_verify_offsets_scratch.device
    bs = _hand_plan_inputs(req_pool_indices, prefix_lens, req_to_token, full_to_swa_index_mapping, None, None,
                           swa_window_size, dev, "launch_plan_offsets_kernel")
    _full(extend_seq_lens, "extend_seq_lens", torch.int64, dev, bs)
    _full(out_verify_offsets_scratch, "out_verify_offsets_scratch", torch.int64, dev, -1)
    wlen = out_write_offsets.shape[0]
    wcap = out_write_seed_slot_indices.shape[0]
    _full(out_write_offsets, "out_write_offsets", torch.int64, dev, wlen)
    _full(out_write_seed_slot_indices, "out_write_seed_slot_indices", torch.int64, dev, wcap)
    for t, name in ((out_verify_num_valid, "out_verify_num_valid"), (out_verify_enable, "out_verify_enable"),
                    (out_write_num_valid_reqs, "out_write_num_valid_reqs")):
        _full(t, name, torch.int32, dev, 1, contiguous=False)
    if (out_verify_offsets_scratch.shape[0] < kc.PLAN_OFFSETS_SCRATCH_LEN or wlen <= 0 or verify_capacity < 0
            or wlen != wcap + 1 or bs > wcap):
        raise ValueError("kv-canary: bad sizes")
    _noop()


def hand_plan_entries(*, req_pool_indices: torch.Tensor, prefix_lens: torch.Tensor, req_to_token: torch.Tensor,
                      full_to_swa_index_mapping: torch.Tensor | None, verify_offsets_scratch: torch.Tensor,
                      verify_enable: torch.Tensor, req_to_verify_expected_tokens: torch.Tensor | None,
                      req_to_verify_expected_tokens_valid_lens: torch.Tensor | None,
                      out_verify_slot_indices: torch.Tensor, out_verify_expected_tokens: torch.Tensor,
                      out_verify_expected_positions: torch.Tensor, out_verify_prev_slot_indices: torch.Tensor,
                      kv_token_id_vs_position_offset: int, swa_window_size: int) -> None:
    dev = verify_offsets_scratch.device
    bs = _hand_plan_inputs(req_pool_indices, prefix_lens, req_to_token, full_to_swa_index_mapping,
                           req_to_verify_expected_tokens, req_to_verify_expected_tokens_valid_lens, swa_window_size,
                           dev, "launch_plan_entries_kernel")
    _full(verify_offsets_scratch, "verify_offsets_scratch", torch.int64, dev, -1)
    if verify_offsets_scratch.shape[0] < bs + 1:
        raise ValueError("kv-canary: scratch too short")
    _full(verify_enable, "verify_enable", torch.int32, dev, 1, contiguous=False)
    cap = out_verify_slot_indices.shape[0]
    for t, name in ((out_verify_slot_indices, "out_verify_slot_indices"),
                    (out_verify_expected_tokens, "out_verify_expected_tokens"),
                    (out_verify_expected_positions, "out_verify_expected_positions"),
                    (out_verify_prev_slot_indices, "out_verify_prev_slot_indices")):
        _full(t, name, torch.int64, dev, cap)
    _noop()


def hand_scatter(*, flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor,
                 pool_out: torch.Tensor) -> None:
    dev = pool_out.device
    bs = req_pool_indices.shape[0]
    _full(flat_in, "flat_in", torch.int64, dev, -1)
    _full(offsets, "offsets", torch.int64, dev, bs + 1)
    _full(req_pool_indices, "req_pool_indices", torch.int64, dev, bs)
    _full(pool_out, "pool_out", torch.int32, dev, -1, -1)
    _noop()


CASES: list[tuple[str, Callable[..., None], Callable[..., None], Callable[[str], dict[str, Any]]]] = [
    ("launch_canary_verify_kernel", kc.launch_canary_verify_kernel, hand_verify, calls.verify),
    ("launch_canary_write_kernel", kc.launch_canary_write_kernel, hand_write, partial(calls.write, assert_inputs=True)),
    ("launch_canary_plan_kernels", kc.launch_canary_plan_kernels, hand_plan, partial(calls.plan, pool=True)),
    ("launch_plan_offsets_kernel", kc.launch_plan_offsets_kernel, hand_plan_offsets, calls.plan_offsets),
    ("launch_plan_entries_kernel", kc.launch_plan_entries_kernel, hand_plan_entries,
     partial(calls.plan_entries, pool=True)),
    ("launch_scatter_req_token_ids_kernel", kc.launch_scatter_req_token_ids_kernel, hand_scatter, calls.scatter),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--out", default=None, help="write the records here (details go to raw/ beside it)")
    args = ap.parse_args()
    REGISTRY.register(NOOP, replace=True)
    r = Report("host_overhead", machine(args.device, "python " + sys.version.split()[0], f"on {args.device}"))
    r.note("figure: the public launcher to a no-op backend; floor: the same checks hand-written, SGLang style")
    try:
        for name, launch, hand, build in CASES:
            kw = build(args.device)
            ours = timing.wall(partial(launch, **kw, backend="noop"), calls=args.calls, reps=7)
            theirs = timing.wall(partial(hand, **kw), calls=args.calls, reps=7)
            r.add(name, ours, theirs, target=1.2)
    finally:
        REGISTRY.unregister("noop")
    r.write(args.out)


if __name__ == "__main__":
    main()

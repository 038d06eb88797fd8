"""plan_offsets: stage 1 alone (SGLang's ``launch_plan_offsets_kernel``), in one program (rows in chunks).

Writes each row's exclusive verify offset (the total at ``[bs]``), the write offsets ``[0..bs]``, the seeds
``[0, bs)``, ``num_valid``, ``enable`` and ``num_valid_reqs``; entries past ``bs`` are left as they were
(the fused plan zeroes the write offsets past ``bs``; this stage does not, as in torch_ref).
"""

from __future__ import annotations

import triton.language as tl

from kvcanary.ops.plan_offsets import PLAN_OFFSETS, PlanOffsetsLaunch
from kvcanary_backends.triton._jit import TUNING, LaunchArgs, Launcher, PreparedLaunch, kernel, type_key
from kvcanary_backends.triton._plan_common import offsets_stage


@kernel()
def _offsets_kernel(
    rpi: tl.tensor, prefix: tl.tensor, extend: tl.tensor, bs: tl.tensor, swa: tl.tensor,
    r2t: tl.tensor, r2t_rows: tl.tensor, r2t_cols: tl.tensor, lut: tl.tensor, lut_len: tl.tensor,
    capacity: tl.tensor, scratch: tl.tensor, write_offsets: tl.tensor, write_offsets_len: tl.tensor,
    seeds_out: tl.tensor, num_valid_out: tl.tensor, enable_out: tl.tensor, num_reqs_out: tl.tensor,
    HAS_LUT: tl.constexpr, CHUNK: tl.constexpr,
) -> None:
    offsets_stage(rpi, prefix, extend, bs, swa, r2t, r2t_rows, r2t_cols, lut, lut_len, capacity, scratch,
                  write_offsets, write_offsets_len, seeds_out, num_valid_out, enable_out, num_reqs_out,
                  HAS_LUT, True, False, CHUNK)


_LAUNCH = Launcher(_offsets_kernel)


def _launch_args(call: PlanOffsetsLaunch) -> LaunchArgs:
    """(grid, variant key, arguments, constexprs, warps) of the launch of ``call``."""
    lut = call.full_to_swa_index_mapping
    args = (call.req_pool_indices, call.prefix_lens, call.extend_seq_lens, call.req_pool_indices.shape[0],
            int(call.swa_window_size), call.req_to_token, call.req_to_token.shape[0], call.req_to_token.shape[1], lut,
            0 if lut is None else lut.shape[0], int(call.verify_capacity), call.out_verify_offsets_scratch,
            call.out_write_offsets, call.out_write_offsets.shape[0], call.out_write_seed_slot_indices,
            call.out_verify_num_valid, call.out_verify_enable, call.out_write_num_valid_reqs)
    return (1,), type_key(args), args, (lut is not None, TUNING["plan_chunk"]), TUNING["plan_warps"]


def prepare(call: PlanOffsetsLaunch) -> PreparedLaunch | None:
    """The launch of ``call`` with its arguments bound (:meth:`Launcher.prepare`)."""
    return _LAUNCH.prepare(*_launch_args(call))


@PLAN_OFFSETS.kernel("triton", notes="one program over up to PLAN_BS_BLOCK_SIZE rows", prepare=prepare)
def plan_offsets(call: PlanOffsetsLaunch) -> None:
    """Launch stage 1 (one program; capture-safe)."""
    _LAUNCH(*_launch_args(call))

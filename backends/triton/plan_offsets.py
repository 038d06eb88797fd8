"""plan_offsets: stage 1 alone (SGLang's ``launch_plan_offsets_kernel``), in one program (rows in chunks).

Writes each row's exclusive verify offset (the total at ``[bs]``), the write offsets ``[0..bs]``, the seeds
``[0, bs)``, ``num_valid``, ``enable`` and ``num_valid_reqs``; entries past ``bs`` are left as they were
(the fused plan zeroes the write offsets past ``bs``; this stage does not, as in torch_ref).
"""

from __future__ import annotations

import torch
import triton.language as tl

from kvcanary.backends.triton._jit import TUNING, Launcher, kernel, type_key
from kvcanary.backends.triton._plan_common import offsets_stage


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


def plan_offsets(
    *,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    full_to_swa_index_mapping: torch.Tensor | None,
    out_verify_offsets_scratch: torch.Tensor,
    out_write_offsets: torch.Tensor,
    out_write_seed_slot_indices: torch.Tensor,
    out_verify_num_valid: torch.Tensor,
    out_verify_enable: torch.Tensor,
    out_write_num_valid_reqs: torch.Tensor,
    swa_window_size: int,
    verify_capacity: int,
) -> None:
    """Launch stage 1 (one program; capture-safe)."""
    lut = full_to_swa_index_mapping
    args = (req_pool_indices, prefix_lens, extend_seq_lens, req_pool_indices.shape[0], int(swa_window_size),
            req_to_token, req_to_token.shape[0], req_to_token.shape[1],
            lut, 0 if lut is None else lut.shape[0],
            int(verify_capacity), out_verify_offsets_scratch, out_write_offsets, out_write_offsets.shape[0],
            out_write_seed_slot_indices, out_verify_num_valid, out_verify_enable, out_write_num_valid_reqs)
    _LAUNCH((1,), type_key(args), args, (lut is not None, TUNING["plan_chunk"]), TUNING["plan_warps"])

"""plan_offsets: stage 1 alone (SGLang's ``launch_plan_offsets_kernel``)."""

from __future__ import annotations

import torch

from kvcanary.backends.torch_ref._plan_common import offsets_stage


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
    bs = req_pool_indices.shape[0]
    lut = full_to_swa_index_mapping
    off = offsets_stage(
        req_pool_indices=req_pool_indices, prefix_lens=prefix_lens, extend_seq_lens=extend_seq_lens,
        req_to_token=req_to_token, lut=lut, swa_window_size=swa_window_size, verify_capacity=verify_capacity,
    )
    out_verify_offsets_scratch[:bs] = off.verify_exclusive
    out_verify_offsets_scratch[bs : bs + 1] = off.verify_total
    out_write_offsets[:bs] = off.write_exclusive
    out_write_offsets[bs : bs + 1] = off.write_total
    out_write_seed_slot_indices[:bs] = off.seeds
    out_verify_num_valid.copy_(off.num_valid)
    out_verify_enable.copy_(off.enable)
    out_write_num_valid_reqs.fill_(bs)

"""plan_entries: stage 2 alone (SGLang's ``launch_plan_entries_kernel``), from stage 1's scratch."""

from __future__ import annotations

import torch

from kvcanary.backends.torch_ref._plan_common import entries_stage


def plan_entries(
    *,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    full_to_swa_index_mapping: torch.Tensor | None,
    verify_offsets_scratch: torch.Tensor,
    verify_enable: torch.Tensor,
    req_to_verify_expected_tokens: torch.Tensor | None,
    req_to_verify_expected_tokens_valid_lens: torch.Tensor | None,
    out_verify_slot_indices: torch.Tensor,
    out_verify_expected_tokens: torch.Tensor,
    out_verify_expected_positions: torch.Tensor,
    out_verify_prev_slot_indices: torch.Tensor,
    kv_token_id_vs_position_offset: int,
    swa_window_size: int,
) -> None:
    bs = req_pool_indices.shape[0]
    lut = full_to_swa_index_mapping
    entries_stage(
        req_pool_indices=req_pool_indices, prefix_lens=prefix_lens, req_to_token=req_to_token, lut=lut,
        swa_window_size=swa_window_size, offsets=verify_offsets_scratch[:bs],
        total=verify_offsets_scratch[bs : bs + 1], enable=verify_enable,
        pool=req_to_verify_expected_tokens, valid_lens=req_to_verify_expected_tokens_valid_lens,
        token_offset=kv_token_id_vs_position_offset, out_slots=out_verify_slot_indices,
        out_tokens=out_verify_expected_tokens, out_positions=out_verify_expected_positions,
        out_prev=out_verify_prev_slot_indices,
    )

"""``launch_plan_entries_kernel``: plan stage 2 (one verify entry per prefix token)."""

from __future__ import annotations

import torch
from typing_extensions import deprecated, overload

from kvcanary.contract.plan_entries import check_plan_entries
from kvcanary.registry import REGISTRY, Op


@overload
def launch_plan_entries_kernel(
    *,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    full_to_swa_index_mapping: torch.Tensor | None,
    verify_offsets_scratch: torch.Tensor,
    verify_enable: torch.Tensor,
    req_to_verify_expected_tokens: torch.Tensor,
    req_to_verify_expected_tokens_valid_lens: torch.Tensor,
    out_verify_slot_indices: torch.Tensor,
    out_verify_expected_tokens: torch.Tensor,
    out_verify_expected_positions: torch.Tensor,
    out_verify_prev_slot_indices: torch.Tensor,
    kv_token_id_vs_position_offset: int,
    swa_window_size: int,
    backend: str | None = None,
) -> None: ...
@overload
def launch_plan_entries_kernel(
    *,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    full_to_swa_index_mapping: torch.Tensor | None,
    verify_offsets_scratch: torch.Tensor,
    verify_enable: torch.Tensor,
    req_to_verify_expected_tokens: None,
    req_to_verify_expected_tokens_valid_lens: torch.Tensor | None,
    out_verify_slot_indices: torch.Tensor,
    out_verify_expected_tokens: torch.Tensor,
    out_verify_expected_positions: torch.Tensor,
    out_verify_prev_slot_indices: torch.Tensor,
    kv_token_id_vs_position_offset: int,
    swa_window_size: int,
    backend: str | None = None,
) -> None: ...
@overload
@deprecated(
    "launch_plan_entries_kernel requires req_to_verify_expected_tokens_valid_lens "
    "when req_to_verify_expected_tokens is set"
)
def launch_plan_entries_kernel(
    *,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    full_to_swa_index_mapping: torch.Tensor | None,
    verify_offsets_scratch: torch.Tensor,
    verify_enable: torch.Tensor,
    req_to_verify_expected_tokens: torch.Tensor,
    req_to_verify_expected_tokens_valid_lens: None,
    out_verify_slot_indices: torch.Tensor,
    out_verify_expected_tokens: torch.Tensor,
    out_verify_expected_positions: torch.Tensor,
    out_verify_prev_slot_indices: torch.Tensor,
    kv_token_id_vs_position_offset: int,
    swa_window_size: int,
    backend: str | None = None,
) -> None: ...
@overload
def launch_plan_entries_kernel(
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
    backend: str | None = None,
) -> None: ...


def launch_plan_entries_kernel(
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
    backend: str | None = None,
) -> None:
    """Write entries ``[0, min(total, capacity))`` where ``total = verify_offsets_scratch[bs]``, unless
    ``verify_enable == 0``. Entries past the total are untouched."""
    kwargs = {
        "req_pool_indices": req_pool_indices,
        "prefix_lens": prefix_lens,
        "req_to_token": req_to_token,
        "full_to_swa_index_mapping": full_to_swa_index_mapping,
        "verify_offsets_scratch": verify_offsets_scratch,
        "verify_enable": verify_enable,
        "req_to_verify_expected_tokens": req_to_verify_expected_tokens,
        "req_to_verify_expected_tokens_valid_lens": req_to_verify_expected_tokens_valid_lens,
        "out_verify_slot_indices": out_verify_slot_indices,
        "out_verify_expected_tokens": out_verify_expected_tokens,
        "out_verify_expected_positions": out_verify_expected_positions,
        "out_verify_prev_slot_indices": out_verify_prev_slot_indices,
        "kv_token_id_vs_position_offset": kv_token_id_vs_position_offset,
        "swa_window_size": swa_window_size,
    }
    device = check_plan_entries(**kwargs)
    REGISTRY.run(Op.PLAN_ENTRIES, device, backend, kwargs)

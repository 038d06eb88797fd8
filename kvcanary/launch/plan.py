"""``launch_canary_plan_kernels``: fill the verify and write plans for one step."""

from __future__ import annotations

import torch
from typing_extensions import deprecated, overload

from kvcanary.contract.plan import check_plan
from kvcanary.plans import VerifyPlan, WritePlan
from kvcanary.registry import REGISTRY, Op


@overload
def launch_canary_plan_kernels(
    *,
    verify_plan_out: VerifyPlan,
    write_plan_out: WritePlan,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    swa_window_size: int,
    full_to_swa_index_mapping: torch.Tensor | None,
    verify_capacity: int,
    req_to_verify_expected_tokens: torch.Tensor,
    req_to_verify_expected_tokens_valid_lens: torch.Tensor,
    kv_token_id_vs_position_offset: int,
    backend: str | None = None,
) -> None: ...
@overload
def launch_canary_plan_kernels(
    *,
    verify_plan_out: VerifyPlan,
    write_plan_out: WritePlan,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    swa_window_size: int,
    full_to_swa_index_mapping: torch.Tensor | None,
    verify_capacity: int,
    req_to_verify_expected_tokens: None,
    req_to_verify_expected_tokens_valid_lens: torch.Tensor | None,
    kv_token_id_vs_position_offset: int,
    backend: str | None = None,
) -> None: ...
@overload
@deprecated(
    "launch_canary_plan_kernels_torch_reference requires req_to_verify_expected_tokens_valid_lens "
    "when req_to_verify_expected_tokens is set"
)
def launch_canary_plan_kernels(
    *,
    verify_plan_out: VerifyPlan,
    write_plan_out: WritePlan,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    swa_window_size: int,
    full_to_swa_index_mapping: torch.Tensor | None,
    verify_capacity: int,
    req_to_verify_expected_tokens: torch.Tensor,
    req_to_verify_expected_tokens_valid_lens: None,
    kv_token_id_vs_position_offset: int,
    backend: str | None = None,
) -> None: ...
@overload
def launch_canary_plan_kernels(
    *,
    verify_plan_out: VerifyPlan,
    write_plan_out: WritePlan,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    swa_window_size: int,
    full_to_swa_index_mapping: torch.Tensor | None,
    verify_capacity: int,
    req_to_verify_expected_tokens: torch.Tensor | None,
    req_to_verify_expected_tokens_valid_lens: torch.Tensor | None,
    kv_token_id_vs_position_offset: int,
    backend: str | None = None,
) -> None: ...


def launch_canary_plan_kernels(
    *,
    verify_plan_out: VerifyPlan,
    write_plan_out: WritePlan,
    req_pool_indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    req_to_token: torch.Tensor,
    swa_window_size: int,
    full_to_swa_index_mapping: torch.Tensor | None,
    verify_capacity: int,
    req_to_verify_expected_tokens: torch.Tensor | None,
    req_to_verify_expected_tokens_valid_lens: torch.Tensor | None,
    kv_token_id_vs_position_offset: int,
    backend: str | None = None,
) -> None:
    """Verify entries for every prefix token ``[window_start, prefix_len)`` of each active row, and the
    write offsets and seeds for the tokens it writes. Overflow sets ``enable = 0`` instead of raising."""
    kwargs = {
        "verify_plan_out": verify_plan_out,
        "write_plan_out": write_plan_out,
        "req_pool_indices": req_pool_indices,
        "prefix_lens": prefix_lens,
        "extend_seq_lens": extend_seq_lens,
        "req_to_token": req_to_token,
        "swa_window_size": swa_window_size,
        "full_to_swa_index_mapping": full_to_swa_index_mapping,
        "verify_capacity": verify_capacity,
        "req_to_verify_expected_tokens": req_to_verify_expected_tokens,
        "req_to_verify_expected_tokens_valid_lens": req_to_verify_expected_tokens_valid_lens,
        "kv_token_id_vs_position_offset": kv_token_id_vs_position_offset,
    }
    device = check_plan(**kwargs)
    REGISTRY.run(Op.PLAN, device, backend, kwargs)

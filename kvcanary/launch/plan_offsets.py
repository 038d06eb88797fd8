"""``launch_plan_offsets_kernel``: plan stage 1 (offsets, seeds, overflow)."""

from __future__ import annotations

import torch

from kvcanary.contract.plan_offsets import check_plan_offsets
from kvcanary.registry import REGISTRY, Op


def launch_plan_offsets_kernel(
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
    backend: str | None = None,
) -> None:
    """Write each row's exclusive verify offset (total at ``[bs]``), the write offsets ``[0..bs]``, the
    seeds ``[0, bs)``, ``num_valid``, ``enable`` and ``num_valid_reqs``. Entries past bs are untouched."""
    kwargs = {
        "req_pool_indices": req_pool_indices,
        "prefix_lens": prefix_lens,
        "extend_seq_lens": extend_seq_lens,
        "req_to_token": req_to_token,
        "full_to_swa_index_mapping": full_to_swa_index_mapping,
        "out_verify_offsets_scratch": out_verify_offsets_scratch,
        "out_write_offsets": out_write_offsets,
        "out_write_seed_slot_indices": out_write_seed_slot_indices,
        "out_verify_num_valid": out_verify_num_valid,
        "out_verify_enable": out_verify_enable,
        "out_write_num_valid_reqs": out_write_num_valid_reqs,
        "swa_window_size": swa_window_size,
        "verify_capacity": verify_capacity,
    }
    device = check_plan_offsets(**kwargs)
    REGISTRY.run(Op.PLAN_OFFSETS, device, backend, kwargs)

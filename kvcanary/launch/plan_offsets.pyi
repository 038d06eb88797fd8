# Generated from the contracts by `python -m kvcanary.launch`; do not edit (a test fails when it drifts).
"""``launch_plan_offsets_kernel``: plan stage 1 (offsets, seeds, overflow)."""

from torch import Tensor

def launch_plan_offsets_kernel(*, req_pool_indices: Tensor, prefix_lens: Tensor, extend_seq_lens: Tensor, req_to_token: Tensor, full_to_swa_index_mapping: Tensor | None, out_verify_offsets_scratch: Tensor, out_write_offsets: Tensor, out_write_seed_slot_indices: Tensor, out_verify_num_valid: Tensor, out_verify_enable: Tensor, out_write_num_valid_reqs: Tensor, swa_window_size: int, verify_capacity: int, backend: str | None = None) -> None:
    """Write each row's exclusive verify offset (total at ``[bs]``), the write offsets ``[0..bs]``, the
    seeds ``[0, bs)``, ``num_valid``, ``enable`` and ``num_valid_reqs``. Entries past bs are untouched."""

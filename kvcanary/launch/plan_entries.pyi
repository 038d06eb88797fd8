# Generated from the contracts by `python -m kvcanary.launch`; do not edit (a test fails when it drifts).
"""``launch_plan_entries_kernel``: plan stage 2 (one verify entry per prefix token)."""

from torch import Tensor
from typing_extensions import NotRequired, TypedDict, Unpack, deprecated, overload

from kvcanary.extensions import Extensions

class _LaunchPlanEntriesKernelFields(TypedDict):
    req_pool_indices: Tensor
    prefix_lens: Tensor
    req_to_token: Tensor
    full_to_swa_index_mapping: Tensor | None
    verify_offsets_scratch: Tensor
    verify_enable: Tensor
    out_verify_slot_indices: Tensor
    out_verify_expected_tokens: Tensor
    out_verify_expected_positions: Tensor
    out_verify_prev_slot_indices: Tensor
    kv_token_id_vs_position_offset: int
    swa_window_size: int
    extensions: NotRequired[Extensions | None]

@overload
def launch_plan_entries_kernel(*, req_to_verify_expected_tokens: Tensor, req_to_verify_expected_tokens_valid_lens: Tensor, backend: str | None = None, **fields: Unpack[_LaunchPlanEntriesKernelFields]) -> None: ...
@overload
def launch_plan_entries_kernel(*, req_to_verify_expected_tokens: None, req_to_verify_expected_tokens_valid_lens: Tensor, backend: str | None = None, **fields: Unpack[_LaunchPlanEntriesKernelFields]) -> None: ...
@overload
def launch_plan_entries_kernel(*, req_to_verify_expected_tokens: None, req_to_verify_expected_tokens_valid_lens: None, backend: str | None = None, **fields: Unpack[_LaunchPlanEntriesKernelFields]) -> None: ...
@overload
@deprecated('KVC-E058: launch_plan_entries_kernel requires req_to_verify_expected_tokens_valid_lens when req_to_verify_expected_tokens is set')
def launch_plan_entries_kernel(*, req_to_verify_expected_tokens: Tensor, req_to_verify_expected_tokens_valid_lens: None, backend: str | None = None, **fields: Unpack[_LaunchPlanEntriesKernelFields]) -> None: ...
@overload
def launch_plan_entries_kernel(*, req_to_verify_expected_tokens: Tensor | None, req_to_verify_expected_tokens_valid_lens: Tensor | None, backend: str | None = None, **fields: Unpack[_LaunchPlanEntriesKernelFields]) -> None:
    """Write entries ``[0, min(total, capacity))`` where ``total = verify_offsets_scratch[bs]``, unless
    ``verify_enable == 0``. Entries past the total are untouched."""

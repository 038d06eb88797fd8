# Generated from the contracts by `python -m kvcanary.launch`; do not edit (a test fails when it drifts).
"""``launch_canary_plan_kernels``: fill the verify and write plans for one step."""

from torch import Tensor
from typing_extensions import NotRequired, TypedDict, Unpack, deprecated, overload

from kvcanary.extensions import Extensions
from kvcanary.plans import VerifyPlan, WritePlan

class _LaunchCanaryPlanKernelsFields(TypedDict):
    verify_plan_out: VerifyPlan
    write_plan_out: WritePlan
    req_pool_indices: Tensor
    prefix_lens: Tensor
    extend_seq_lens: Tensor
    req_to_token: Tensor
    swa_window_size: int
    full_to_swa_index_mapping: Tensor | None
    verify_capacity: int
    kv_token_id_vs_position_offset: int
    extensions: NotRequired[Extensions | None]

@overload
def launch_canary_plan_kernels(*, req_to_verify_expected_tokens: Tensor, req_to_verify_expected_tokens_valid_lens: Tensor, backend: str | None = None, **fields: Unpack[_LaunchCanaryPlanKernelsFields]) -> None: ...
@overload
def launch_canary_plan_kernels(*, req_to_verify_expected_tokens: None, req_to_verify_expected_tokens_valid_lens: Tensor, backend: str | None = None, **fields: Unpack[_LaunchCanaryPlanKernelsFields]) -> None: ...
@overload
def launch_canary_plan_kernels(*, req_to_verify_expected_tokens: None, req_to_verify_expected_tokens_valid_lens: None, backend: str | None = None, **fields: Unpack[_LaunchCanaryPlanKernelsFields]) -> None: ...
@overload
@deprecated('KVC-P084: launch_canary_plan_kernels_torch_reference requires req_to_verify_expected_tokens_valid_lens when req_to_verify_expected_tokens is set')
def launch_canary_plan_kernels(*, req_to_verify_expected_tokens: Tensor, req_to_verify_expected_tokens_valid_lens: None, backend: str | None = None, **fields: Unpack[_LaunchCanaryPlanKernelsFields]) -> None: ...
@overload
def launch_canary_plan_kernels(*, req_to_verify_expected_tokens: Tensor | None, req_to_verify_expected_tokens_valid_lens: Tensor | None, backend: str | None = None, **fields: Unpack[_LaunchCanaryPlanKernelsFields]) -> None:
    """Verify entries for every prefix token ``[window_start, prefix_len)`` of each active row, and the
    write offsets and seeds for the tokens it writes. Overflow sets ``enable = 0`` instead of raising."""

# Generated from the contracts by `python -m kvcanary.launch`; do not edit (a test fails when it drifts).
"""``launch_canary_write_kernel``: stamp the records of the tokens a step writes."""

from typing import Literal

from torch import Tensor
from typing_extensions import NotRequired, TypedDict, Unpack, deprecated, overload

from kvcanary.context import VerifyOrWriteContext
from kvcanary.extensions import Extensions
from kvcanary.plans import WritePlan

class _LaunchCanaryWriteKernelFields(TypedDict):
    context: VerifyOrWriteContext
    plan: WritePlan
    input_ids: Tensor
    positions: Tensor
    out_cache_loc: Tensor
    req_pool_indices: NotRequired[Tensor | None]
    req_to_token: NotRequired[Tensor | None]
    full_to_swa_index_mapping: NotRequired[Tensor | None]
    slot_owner: NotRequired[Tensor | None]
    extensions: NotRequired[Extensions | None]

@overload
def launch_canary_write_kernel(*, enable_write_input_assert: Literal[True], expected_input_tokens: Tensor, expected_input_positions: Tensor, backend: str | None = None, **fields: Unpack[_LaunchCanaryWriteKernelFields]) -> None: ...
@overload
def launch_canary_write_kernel(*, enable_write_input_assert: Literal[False], expected_input_tokens: None, expected_input_positions: None, backend: str | None = None, **fields: Unpack[_LaunchCanaryWriteKernelFields]) -> None: ...
@overload
@deprecated('KVC-W083: expected input tensors are required when enable_write_input_assert=True')
def launch_canary_write_kernel(*, enable_write_input_assert: Literal[True], expected_input_tokens: None, expected_input_positions: Tensor | None, backend: str | None = None, **fields: Unpack[_LaunchCanaryWriteKernelFields]) -> None: ...
@overload
@deprecated('KVC-W083: expected input tensors are required when enable_write_input_assert=True')
def launch_canary_write_kernel(*, enable_write_input_assert: Literal[True], expected_input_tokens: Tensor | None, expected_input_positions: None, backend: str | None = None, **fields: Unpack[_LaunchCanaryWriteKernelFields]) -> None: ...
@overload
@deprecated('KVC-W084: expected input tensors must be None when enable_write_input_assert=False')
def launch_canary_write_kernel(*, enable_write_input_assert: Literal[False], expected_input_tokens: Tensor, expected_input_positions: Tensor | None, backend: str | None = None, **fields: Unpack[_LaunchCanaryWriteKernelFields]) -> None: ...
@overload
@deprecated('KVC-W084: expected input tensors must be None when enable_write_input_assert=False')
def launch_canary_write_kernel(*, enable_write_input_assert: Literal[False], expected_input_tokens: Tensor | None, expected_input_positions: Tensor, backend: str | None = None, **fields: Unpack[_LaunchCanaryWriteKernelFields]) -> None: ...
@overload
def launch_canary_write_kernel(*, enable_write_input_assert: bool, expected_input_tokens: Tensor | None, expected_input_positions: Tensor | None, backend: str | None = None, **fields: Unpack[_LaunchCanaryWriteKernelFields]) -> None:
    """Write one record per token with ``out_cache_loc >= 0``, chained per request from its seed slot."""

# Generated from the contracts by `python -m tools.launcher_stubs`; do not edit (a test fails when it drifts).
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
    """Write one record per token with ``out_cache_loc >= 0``, chained per request from its seed slot.

    Write canary records for the step's tokens (chain, position, token, real-KV fingerprint).

    Args:
        context: The endpoint's buffers.
            Checks: KVC-W001, KVC-W002, KVC-W003, KVC-W004, KVC-W005, KVC-W006, KVC-W007, KVC-W008, KVC-W009, KVC-W010, KVC-W011, KVC-W012, KVC-W013, KVC-W014, KVC-W015, KVC-W016, KVC-W017, KVC-W018, KVC-W019, KVC-W020, KVC-W021, KVC-W022, KVC-W023, KVC-W024, KVC-W025, KVC-W026, KVC-W027, KVC-W028, KVC-W029, KVC-W030, KVC-W031, KVC-W032, KVC-W033, KVC-W034, KVC-W035, KVC-W036, KVC-W037, KVC-W038, KVC-W039, KVC-W081, KVC-W082, KVC-W085, KVC-W086, KVC-W087, KVC-W088, KVC-W089, KVC-W090, KVC-W099, KVC-W100, KVC-W101, KVC-W102, KVC-W103, KVC-W104, KVC-W105, KVC-W106, KVC-W107, KVC-W108, KVC-W109, KVC-W111.
        plan: Per-request write ranges.
            Checks: KVC-W040, KVC-W041, KVC-W042, KVC-W043, KVC-W044, KVC-W045, KVC-W046, KVC-W047, KVC-W048, KVC-W049, KVC-W050, KVC-W051, KVC-W052, KVC-W053, KVC-W091, KVC-W092, KVC-W093.
        input_ids: Token id per flat token (padded tail ignored).
            Checks: KVC-W054, KVC-W055, KVC-W056, KVC-W057, KVC-W094.
        positions: Position per flat token.
            Checks: KVC-W058, KVC-W059, KVC-W060, KVC-W061, KVC-W062, KVC-W095.
        out_cache_loc: Canary slot per flat token; -1 skips the token.
            Checks: KVC-W063, KVC-W064, KVC-W065, KVC-W066, KVC-W067, KVC-W096.
        enable_write_input_assert: Compare each token and position with the oracle's expected ones.
            Checks: KVC-W068, KVC-W083, KVC-W084.
        expected_input_tokens: Oracle token per flat token (only with the input assert).
            Checks: KVC-W069, KVC-W070, KVC-W071, KVC-W072, KVC-W073, KVC-W097.
        expected_input_positions: Oracle position per flat token (only with the input assert).
            Checks: KVC-W074, KVC-W075, KVC-W076, KVC-W077, KVC-W078, KVC-W098.
        req_pool_indices (optional): req_to_token row of each write-plan request row, the writer (write-slot and owner checks only; a request row past its end is not checked).
            Checks: KVC-W113, KVC-W114, KVC-W115, KVC-W116, KVC-W129, KVC-W130, KVC-W140.
        req_to_token (optional): The engine's request-to-slot table (write-slot check only).
            Checks: KVC-W117, KVC-W118, KVC-W119, KVC-W120, KVC-W131.
        full_to_swa_index_mapping (optional): full→SWA translation of req_to_token for an SWA group's write (write-slot check only; None for a FULL group).
            Checks: KVC-W121, KVC-W122, KVC-W123, KVC-W124, KVC-W125, KVC-W132.
        slot_owner (optional): Owner map, one entry per canary slot: the req_to_token row that holds the slot, -1 free, below -1 held read-only (write-time owner check only).
            Checks: KVC-W134, KVC-W135, KVC-W136, KVC-W137, KVC-W138, KVC-W141.
        extensions (optional): Opt-in extension checks (kvcanary.Extensions); None runs exactly the default kernels.
            Checks: KVC-W126, KVC-W127, KVC-W128, KVC-W139.
        backend (optional): Force this backend by name (None: the registry picks).

    Rules:
        - expected input tensors are required when enable_write_input_assert=True
        - expected input tensors must be None when enable_write_input_assert=False
        - launch_canary_write_kernel requires req_pool_indices and req_to_token when extensions.write_slot_mismatch is on
        - req_to_token must have at least one row and one column (row 0 is the padding row), got shape {shape} (KVC-W133)
        - launch_canary_write_kernel requires req_pool_indices and slot_owner when extensions.write_slot_owner_mismatch is on

    Other checks:
        - KVC-W079 (requires `slot_stride_bytes >= 32`)
        - KVC-W080 (requires `slot_stride_bytes % 8 == 0`)
        - KVC-W110 (requires `num_slots >= 1`)
        - KVC-W112 (no tensor the launch writes may share memory with another argument)

    Raises:
        ContractError (a ValueError) before anything runs, for a call that breaks a check: 141 checks, codes KVC-W001 to KVC-W141; each error names its code and the page that explains it."""

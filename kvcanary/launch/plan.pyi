# Generated from the contracts by `python -m tools.launcher_stubs`; do not edit (a test fails when it drifts).
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
    write offsets and seeds for the tokens it writes. Overflow sets ``enable = 0`` instead of raising.

    Fill the verify and write plans from the batch and req_to_token.

    Args:
        verify_plan_out: Verify plan to fill (in place).
            Checks: KVC-P001, KVC-P002, KVC-P003, KVC-P004, KVC-P005, KVC-P006, KVC-P007, KVC-P008, KVC-P009, KVC-P010, KVC-P011, KVC-P012, KVC-P013, KVC-P014, KVC-P015, KVC-P016, KVC-P017, KVC-P018, KVC-P019, KVC-P020, KVC-P021, KVC-P022, KVC-P023, KVC-P024, KVC-P025, KVC-P026, KVC-P027, KVC-P028, KVC-P029, KVC-P030, KVC-P031, KVC-P032, KVC-P033, KVC-P089, KVC-P090, KVC-P091, KVC-P092, KVC-P093, KVC-P094, KVC-P113, KVC-P114.
        write_plan_out: Write plan to fill (in place).
            Checks: KVC-P034, KVC-P035, KVC-P036, KVC-P037, KVC-P038, KVC-P039, KVC-P040, KVC-P041, KVC-P042, KVC-P043, KVC-P044, KVC-P045, KVC-P046, KVC-P047, KVC-P095, KVC-P096, KVC-P097.
        req_pool_indices: req_to_token row per batch row; 0 is the CUDA-graph padding row.
            Checks: KVC-P048, KVC-P049, KVC-P050, KVC-P051, KVC-P098.
        prefix_lens: Tokens each request already has in the KV cache (verified this step).
            Checks: KVC-P052, KVC-P053, KVC-P054, KVC-P055, KVC-P056, KVC-P099.
        extend_seq_lens: Tokens each request writes this step.
            Checks: KVC-P057, KVC-P058, KVC-P059, KVC-P060, KVC-P061, KVC-P100.
        req_to_token: The engine's request-to-slot table (ReqToTokenPool.req_to_token), int32.
            Checks: KVC-P062, KVC-P063, KVC-P064, KVC-P065, KVC-P101.
        swa_window_size: Sliding window: verify only the last swa_window_size prefix tokens (0: all).
            Checks: KVC-P066, KVC-P085, KVC-P105, KVC-P106.
        full_to_swa_index_mapping: full→SWA slot translation; required when swa_window_size > 0. Whenever given it translates every slot read (with swa_window_size=0: the whole prefix, translated); None for a FULL group.
            Checks: KVC-P067, KVC-P068, KVC-P069, KVC-P070, KVC-P071, KVC-P083, KVC-P102.
        verify_capacity: Must equal verify_plan_out's capacity; more entries than this overflow (enable = 0).
            Checks: KVC-P072, KVC-P107, KVC-P108.
        req_to_verify_expected_tokens: Per-request expected token ids (token-id validator), int32 [max_reqs, max_context_len].
            Checks: KVC-P073, KVC-P074, KVC-P075, KVC-P076, KVC-P103.
        req_to_verify_expected_tokens_valid_lens: Valid length of each batch row's pool row; required with the pool (ignored, never read, without one).
            Checks: KVC-P077, KVC-P078, KVC-P079, KVC-P080, KVC-P081, KVC-P084, KVC-P104.
        kv_token_id_vs_position_offset: Slot p holds the KV of token p + offset (0 for target pools, 1 for EAGLE draft pools).
            Checks: KVC-P082, KVC-P109, KVC-P110.
        extensions (optional): Opt-in extension checks (kvcanary.Extensions); None runs exactly the default kernels.
            Checks: KVC-P115, KVC-P116, KVC-P117, KVC-P118.
        backend (optional): Force this backend by name (None: the registry picks).

    Rules:
        - launch_canary_plan_kernels requires full_to_swa_index_mapping when swa_window_size > 0
        - launch_canary_plan_kernels_torch_reference requires req_to_verify_expected_tokens_valid_lens when req_to_verify_expected_tokens is set
        - launch_canary_plan_kernels swa_window_size must be >= 0, got {swa_window_size}
        - req_to_token must have at least one row and one column (row 0 is the padding row), got shape {shape} (KVC-P111)
        - req_to_verify_expected_tokens must have at least one row and one column, got shape {shape} (KVC-P112)
        - launch_canary_plan_kernels supports at most bs={PLAN_BS_BLOCK_SIZE} reqs per launch, got bs={bs}. Bump _PLAN_BS_BLOCK_SIZE if real workloads need this. (KVC-P086)
        - launch_canary_plan_kernels_torch_reference verify_capacity={verify_capacity} does not match verify_plan_out.verify_slot_indices.shape[0]={plan_verify_capacity} (KVC-P087)
        - bs={bs} exceeds write_req_capacity={write_req_capacity} (KVC-P088)

    Raises:
        ContractError (a ValueError) before anything runs, for a call that breaks a check: 118 checks, codes KVC-P001 to KVC-P118; each error names its code and the page that explains it."""

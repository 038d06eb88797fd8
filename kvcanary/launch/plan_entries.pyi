# Generated from the contracts by `python -m tools.launcher_stubs`; do not edit (a test fails when it drifts).
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
    ``verify_enable == 0``. Entries past the total are untouched.

    Plan stage 2: write one verify entry per prefix token.

    Args:
        req_pool_indices: req_to_token row per batch row; 0 is the CUDA-graph padding row.
            Checks: KVC-E001, KVC-E002, KVC-E003, KVC-E004, KVC-E062.
        prefix_lens: Tokens each request already has in the KV cache (verified this step).
            Checks: KVC-E005, KVC-E006, KVC-E007, KVC-E008, KVC-E009, KVC-E063.
        req_to_token: The engine's request-to-slot table (ReqToTokenPool.req_to_token), int32.
            Checks: KVC-E010, KVC-E011, KVC-E012, KVC-E013, KVC-E064.
        full_to_swa_index_mapping: full→SWA slot translation; required when swa_window_size > 0. Whenever given it translates every slot read (with swa_window_size=0: the whole prefix, translated); None for a FULL group.
            Checks: KVC-E014, KVC-E015, KVC-E016, KVC-E017, KVC-E018, KVC-E059, KVC-E065.
        verify_offsets_scratch: Stage 1's exclusive verify offsets, total at [bs].
            Checks: KVC-E019, KVC-E020, KVC-E021, KVC-E022, KVC-E023, KVC-E079.
        verify_enable: Stage 1's overflow flag: 0 writes nothing.
            Checks: KVC-E024, KVC-E025, KVC-E026, KVC-E027, KVC-E066.
        req_to_verify_expected_tokens: Per-request expected token ids (token-id validator), int32 [max_reqs, max_context_len].
            Checks: KVC-E028, KVC-E029, KVC-E030, KVC-E031, KVC-E067.
        req_to_verify_expected_tokens_valid_lens: Valid length of each batch row's pool row; required with the pool (ignored, never read, without one).
            Checks: KVC-E032, KVC-E033, KVC-E034, KVC-E035, KVC-E036, KVC-E058, KVC-E068.
        out_verify_slot_indices: Receives the slot of each entry.
            Checks: KVC-E037, KVC-E038, KVC-E039, KVC-E040, KVC-E069, KVC-E080.
        out_verify_expected_tokens: Receives the expected token of each entry (-1: none).
            Checks: KVC-E041, KVC-E042, KVC-E043, KVC-E044, KVC-E045, KVC-E070.
        out_verify_expected_positions: Receives the position of each entry.
            Checks: KVC-E046, KVC-E047, KVC-E048, KVC-E049, KVC-E050, KVC-E071.
        out_verify_prev_slot_indices: Receives the predecessor slot of each entry (-1: chain head).
            Checks: KVC-E051, KVC-E052, KVC-E053, KVC-E054, KVC-E055, KVC-E072.
        kv_token_id_vs_position_offset: Slot p holds the KV of token p + offset (0 for target pools, 1 for EAGLE draft pools).
            Checks: KVC-E056, KVC-E073, KVC-E074.
        swa_window_size: Sliding window: verify only the last swa_window_size prefix tokens (0: all).
            Checks: KVC-E057, KVC-E060, KVC-E075, KVC-E076.
        extensions (optional): Opt-in extension checks (kvcanary.Extensions); None runs exactly the default kernels.
            Checks: KVC-E081, KVC-E082, KVC-E083, KVC-E084.
        backend (optional): Force this backend by name (None: the registry picks).

    Rules:
        - launch_plan_entries_kernel requires req_to_verify_expected_tokens_valid_lens when req_to_verify_expected_tokens is set
        - launch_plan_entries_kernel requires full_to_swa_index_mapping when swa_window_size > 0
        - launch_plan_entries_kernel swa_window_size must be >= 0, got {swa_window_size}
        - req_to_token must have at least one row and one column (row 0 is the padding row), got shape {shape} (KVC-E077)
        - req_to_verify_expected_tokens must have at least one row and one column, got shape {shape} (KVC-E078)
        - launch_plan_entries_kernel supports at most bs={PLAN_BS_BLOCK_SIZE} reqs per launch, got bs={bs}. Bump _PLAN_BS_BLOCK_SIZE if real workloads need this. (KVC-E061)

    Raises:
        ContractError (a ValueError) before anything runs, for a call that breaks a check: 84 checks, codes KVC-E001 to KVC-E084; each error names its code and the page that explains it."""

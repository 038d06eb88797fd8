# Generated from the contracts by `python -m tools.launcher_stubs`; do not edit (a test fails when it drifts).
"""``launch_plan_offsets_kernel``: plan stage 1 (offsets, seeds, overflow)."""

from torch import Tensor

def launch_plan_offsets_kernel(*, req_pool_indices: Tensor, prefix_lens: Tensor, extend_seq_lens: Tensor, req_to_token: Tensor, full_to_swa_index_mapping: Tensor | None, out_verify_offsets_scratch: Tensor, out_write_offsets: Tensor, out_write_seed_slot_indices: Tensor, out_verify_num_valid: Tensor, out_verify_enable: Tensor, out_write_num_valid_reqs: Tensor, swa_window_size: int, verify_capacity: int, backend: str | None = None) -> None:
    """Write each row's exclusive verify offset (total at ``[bs]``), the write offsets ``[0..bs]``, the
    seeds ``[0, bs)``, ``num_valid``, ``enable`` and ``num_valid_reqs``. Entries past bs are untouched.

    Plan stage 1: offsets, write metadata and the overflow decision.

    Args:
        req_pool_indices: req_to_token row per batch row; 0 is the CUDA-graph padding row.
            Checks: KVC-O001, KVC-O002, KVC-O003, KVC-O004, KVC-O058.
        prefix_lens: Tokens each request already has in the KV cache (verified this step).
            Checks: KVC-O005, KVC-O006, KVC-O007, KVC-O008, KVC-O009, KVC-O059.
        extend_seq_lens: Tokens each request writes this step.
            Checks: KVC-O010, KVC-O011, KVC-O012, KVC-O013, KVC-O014, KVC-O060.
        req_to_token: The engine's request-to-slot table (ReqToTokenPool.req_to_token), int32.
            Checks: KVC-O015, KVC-O016, KVC-O017, KVC-O018, KVC-O061.
        full_to_swa_index_mapping: full→SWA slot translation; required when swa_window_size > 0. Whenever given it translates every slot read (with swa_window_size=0: the whole prefix, translated); None for a FULL group. Messages call it lut_tensor (SGLang's name).
            Checks: KVC-O019, KVC-O020, KVC-O021, KVC-O022, KVC-O023, KVC-O051, KVC-O062.
        out_verify_offsets_scratch: Receives each row's exclusive verify offset and the total at [bs].
            Checks: KVC-O024, KVC-O025, KVC-O026, KVC-O027, KVC-O028, KVC-O073, KVC-O074.
        out_write_offsets: Receives the exclusive write offsets [0..bs].
            Checks: KVC-O029, KVC-O030, KVC-O031, KVC-O032, KVC-O063.
        out_write_seed_slot_indices: Receives each row's seed slot (-1: anchor).
            Checks: KVC-O033, KVC-O034, KVC-O035, KVC-O036, KVC-O064.
        out_verify_num_valid: Receives min(total_verify, verify_capacity).
            Checks: KVC-O037, KVC-O038, KVC-O039, KVC-O040, KVC-O065.
        out_verify_enable: Receives 1, or 0 when the verify plan overflows.
            Checks: KVC-O041, KVC-O042, KVC-O043, KVC-O044, KVC-O066.
        out_write_num_valid_reqs: Receives bs.
            Checks: KVC-O045, KVC-O046, KVC-O047, KVC-O048, KVC-O067.
        swa_window_size: Sliding window: verify only the last swa_window_size prefix tokens (0: all).
            Checks: KVC-O049, KVC-O052, KVC-O068, KVC-O069.
        verify_capacity: Overflow threshold.
            Checks: KVC-O050, KVC-O055, KVC-O070, KVC-O071.
        backend (optional): Force this backend by name (None: the registry picks).

    Rules:
        - launch_plan_offsets_kernel requires full_to_swa_index_mapping when swa_window_size > 0
        - launch_plan_offsets_kernel swa_window_size must be >= 0, got {swa_window_size}
        - req_to_token must have at least one row and one column (row 0 is the padding row), got shape {shape} (KVC-O072)
        - offsets kernel bs must be in [0, {PLAN_BS_BLOCK_SIZE}], got {bs} (KVC-O053)
        - write_offsets_len must be positive, got {write_offsets_len} (KVC-O054)
        - verify_capacity must be non-negative, got {verify_capacity}
        - write_offsets_len must equal write_req_capacity + 1, got {write_offsets_len} and {write_req_capacity} (KVC-O056)
        - bs={bs} exceeds write_req_capacity={write_req_capacity} (KVC-O057)

    Raises:
        ContractError (a ValueError) before anything runs, for a call that breaks a check: 74 checks, codes KVC-O001 to KVC-O074; each error names its code and the page that explains it."""

# Generated from the contracts by `python -m tools.launcher_stubs`; do not edit (a test fails when it drifts).
"""``launch_verify_budget_kernel``: filter a verify plan down to a verification budget's entries."""

from torch import Tensor

def launch_verify_budget_kernel(*, req_pool_indices: Tensor, verify_offsets_scratch: Tensor, verify_slot_indices: Tensor, verify_expected_tokens: Tensor, verify_expected_positions: Tensor, verify_prev_slot_indices: Tensor, verify_num_valid: Tensor, verify_enable: Tensor, cursor: Tensor, advance: Tensor, out_verify_slot_indices: Tensor, out_verify_expected_tokens: Tensor, out_verify_expected_positions: Tensor, out_verify_prev_slot_indices: Tensor, out_verify_num_valid: Tensor, out_verify_enable: Tensor, newest_per_request: int, stride: int, skipped_verifies: Tensor | None = None, backend: str | None = None) -> None:
    """Write the budget's plan (each request's ``newest_per_request`` last entries and its window of
    ``stride`` older ones from its row's cursor, in plan order, at most the output's capacity) and its count
    and enable, then advance the cursors (token positions) of the requests with entries by ``advance *
    verify_enable * stride``. Given a
    ``skipped_verifies`` counter (int64, shape (1,), on the plan's device), add ``1 - verify_enable`` to it:
    one overflow counted per launch whose full plan overflowed, empty batch included. No host read:
    capturable.

    Filter a verify plan down to a verification budget's entries and advance its cursors.

    Args:
        req_pool_indices: Each request's row (its cursor's index; clamped into the cursor).
            Checks: KVC-U001, KVC-U002, KVC-U003, KVC-U004, KVC-U084.
        verify_offsets_scratch: The full plan's per-request exclusive offsets, the total at [bs] (plan stage 1's scratch).
            Checks: KVC-U005, KVC-U006, KVC-U007, KVC-U008, KVC-U009, KVC-U085.
        verify_slot_indices: The full plan's slots.
            Checks: KVC-U010, KVC-U011, KVC-U012, KVC-U013, KVC-U083.
        verify_expected_tokens: The full plan's expected tokens.
            Checks: KVC-U014, KVC-U015, KVC-U016, KVC-U017, KVC-U018, KVC-U086.
        verify_expected_positions: The full plan's expected positions.
            Checks: KVC-U019, KVC-U020, KVC-U021, KVC-U022, KVC-U023, KVC-U087.
        verify_prev_slot_indices: The full plan's predecessor slots.
            Checks: KVC-U024, KVC-U025, KVC-U026, KVC-U027, KVC-U028, KVC-U088.
        verify_num_valid: The full plan's entry count (min(total, verify_capacity)); a count past the capacity keeps nothing beyond it.
            Checks: KVC-U029, KVC-U030, KVC-U031, KVC-U032, KVC-U089.
        verify_enable: The full plan's enable (0: it overflowed).
            Checks: KVC-U033, KVC-U034, KVC-U035, KVC-U036, KVC-U090.
        cursor: Per request row: the token position where its window of older entries starts (taken modulo the older entries, from the request's first entry's position); advanced in place by requests with entries (padding rows, of none, never move it). A row named by two requests with entries (an engine bug): its cursor and the older entries each of them keeps are undefined (one reads the other's write).
            Checks: KVC-U037, KVC-U038, KVC-U039, KVC-U040, KVC-U091, KVC-U099.
        advance: 1: the cursors move by stride this step (if verify_enable is 1: an overflowed plan moves none); 0: they stay this step.
            Checks: KVC-U041, KVC-U042, KVC-U043, KVC-U044, KVC-U092.
        out_verify_slot_indices: Receives the kept entries' slots (entries past the count are left undefined).
            Checks: KVC-U045, KVC-U046, KVC-U047, KVC-U048, KVC-U093.
        out_verify_expected_tokens: Receives the kept entries' expected tokens.
            Checks: KVC-U049, KVC-U050, KVC-U051, KVC-U052, KVC-U053, KVC-U094.
        out_verify_expected_positions: Receives the kept entries' expected positions.
            Checks: KVC-U054, KVC-U055, KVC-U056, KVC-U057, KVC-U058, KVC-U095.
        out_verify_prev_slot_indices: Receives the kept entries' predecessor slots.
            Checks: KVC-U059, KVC-U060, KVC-U061, KVC-U062, KVC-U063, KVC-U096.
        out_verify_num_valid: Receives the kept entries the full plan holds, at most budget_capacity.
            Checks: KVC-U064, KVC-U065, KVC-U066, KVC-U067, KVC-U097.
        out_verify_enable: Receives verify_enable.
            Checks: KVC-U068, KVC-U069, KVC-U070, KVC-U071, KVC-U098.
        newest_per_request: Each request's newest entries, kept every step.
            Checks: KVC-U072, KVC-U073, KVC-U074, KVC-U080.
        stride: Each request's older entries kept per step (its window's length).
            Checks: KVC-U075, KVC-U076, KVC-U077, KVC-U079.
        skipped_verifies (optional): The overflow counter: 1 - verify_enable is added to it (one thread), so a full plan that overflowed (enable 0) counts once per launch, even of an empty batch; None: no count.
            Checks: KVC-U100, KVC-U101, KVC-U102, KVC-U103, KVC-U104.
        backend (optional): Force this backend by name (None: the registry picks).

    Rules:
        - verify_budget bs must be in [0, {PLAN_BS_BLOCK_SIZE}], got {bs} (KVC-U078)
        - verify_budget stride must be at least 1, got {stride}
        - verify_budget newest_per_request must be non-negative, got {newest_per_request}
        - verify_budget verify_capacity must be positive, got {verify_capacity} (KVC-U081)
        - verify_budget cursor must hold at least one request row, got {num_rows} (KVC-U082)

    Raises:
        ContractError (a ValueError) before anything runs, for a call that breaks a check: 104 checks, codes KVC-U001 to KVC-U104; each error names its code and the page that explains it."""

# Generated from the contracts by `python -m tools.launcher_stubs`; do not edit (a test fails when it drifts).
"""``launch_scatter_req_token_ids_kernel``: fill the expected-token pool for VERIFY_TOKEN checks."""

from torch import Tensor

def launch_scatter_req_token_ids_kernel(*, flat_in: Tensor, offsets: Tensor, req_pool_indices: Tensor, pool_out: Tensor, backend: str | None = None) -> None:
    """``pool_out[rp, :min(len, cols)] = int32(flat_in[start:start+len])`` per request; the last request
    naming a row wins; everything else in the pool is left as it was.

    Scatter per-request token ids into the expected-token pool for VERIFY_TOKEN checks.

    Args:
        flat_in: origin_input_ids + output_ids of every request, concatenated.
            Checks: KVC-S001, KVC-S002, KVC-S003, KVC-S004, KVC-S018.
        offsets: Start of each request in flat_in, and the total (bs + 1 entries).
            Checks: KVC-S005, KVC-S006, KVC-S007, KVC-S008, KVC-S019.
        req_pool_indices: Pool row of each request.
            Checks: KVC-S009, KVC-S010, KVC-S011, KVC-S012, KVC-S020.
        pool_out: The expected-token pool, updated in place (rows and columns not written stay as they were).
            Checks: KVC-S013, KVC-S014, KVC-S015, KVC-S016, KVC-S022, KVC-S023.
        backend (optional): Force this backend by name (None: the registry picks).

    Rules:
        - scatter_req_token_ids offsets length {offsets_len} != bs+1 ({bs_plus_1}) (KVC-S017)
        - scatter_req_token_ids pool_out must have at least one row and one column, got shape {shape} (KVC-S021)

    Raises:
        ContractError (a ValueError) before anything runs, for a call that breaks a check: 23 checks, codes KVC-S001 to KVC-S023; each error names its code and the page that explains it."""

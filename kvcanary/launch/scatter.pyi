# Generated from the contracts by `python -m kvcanary.launch`; do not edit (a test fails when it drifts).
"""``launch_scatter_req_token_ids_kernel``: fill the expected-token pool for VERIFY_TOKEN checks."""

from torch import Tensor

def launch_scatter_req_token_ids_kernel(*, flat_in: Tensor, offsets: Tensor, req_pool_indices: Tensor, pool_out: Tensor, backend: str | None = None) -> None:
    """``pool_out[rp, :min(len, cols)] = int32(flat_in[start:start+len])`` per request; the last request
    naming a row wins; everything else in the pool is left as it was."""

"""``launch_scatter_req_token_ids_kernel``: fill the expected-token pool for VERIFY_TOKEN checks."""

from __future__ import annotations

from kvcanary.contract.scatter import ScatterLaunch
from kvcanary.launch._make import launcher
from kvcanary.registry import Op

launch_scatter_req_token_ids_kernel = launcher(
    ScatterLaunch, Op.SCATTER, __name__,
    """``pool_out[rp, :min(len, cols)] = int32(flat_in[start:start+len])`` per request; the last request
    naming a row wins; everything else in the pool is left as it was.""",
)

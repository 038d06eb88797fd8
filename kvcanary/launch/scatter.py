"""``launch_scatter_req_token_ids_kernel``: fill the expected-token pool for VERIFY_TOKEN checks."""

from __future__ import annotations

import torch

from kvcanary.contract.scatter import check_scatter
from kvcanary.registry import REGISTRY, Op


def launch_scatter_req_token_ids_kernel(
    *,
    flat_in: torch.Tensor,
    offsets: torch.Tensor,
    req_pool_indices: torch.Tensor,
    pool_out: torch.Tensor,
    backend: str | None = None,
) -> None:
    """``pool_out[rp, :min(len, cols)] = int32(flat_in[start:start+len])`` per request; the last request
    naming a row wins; everything else in the pool is left as it was."""
    kwargs = {"flat_in": flat_in, "offsets": offsets, "req_pool_indices": req_pool_indices, "pool_out": pool_out}
    device = check_scatter(**kwargs)
    REGISTRY.run(Op.SCATTER, device, backend, kwargs)

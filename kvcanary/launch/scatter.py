"""``launch_scatter_req_token_ids_kernel``: fill the expected-token pool for VERIFY_TOKEN checks."""

from __future__ import annotations

from kvcanary.ops.scatter import launch_scatter_req_token_ids_kernel

__all__ = ["launch_scatter_req_token_ids_kernel"]

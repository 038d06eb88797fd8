"""scatter_req_token_ids: copy each request's token ids into its pool row (int32, low 32 bits).

Request ``r`` writes columns ``j < min(offsets[r+1] - offsets[r], pool_cols)`` of row
``req_pool_indices[r]`` from ``flat_in[offsets[r] + j]``. When several requests name the same row, the
last one covering a column owns it; a column whose flat index lies outside ``flat_in`` is not written by
anyone. Rows outside the pool are skipped. Nothing else changes. The width is computed from the exact
difference of the two offsets (never a wrapped one: offsets straddling 0 by more than INT64_MAX cover every
column).
"""

from __future__ import annotations

import torch

from kvcanary.ops.scatter import SCATTER, ScatterLaunch


@SCATTER.kernel("torch_ref", host_sync=True)
def scatter_req_token_ids(call: ScatterLaunch) -> None:
    bs = call.req_pool_indices.shape[0]
    ntok = call.flat_in.shape[0]
    if bs == 0 or ntok == 0:
        return
    rows, cols = call.pool_out.shape
    starts = call.offsets[:bs]
    ends = call.offsets[1 : bs + 1]
    diff = ends - starts  # where ends > starts, it wraps (negative) only when the exact one exceeds INT64_MAX
    width = torch.where(ends <= starts, 0, torch.where(diff < 0, cols, torch.clamp(diff, max=cols)))
    row_ok = (call.req_pool_indices >= 0) & (call.req_pool_indices < rows)
    width = torch.where(row_ok, width, 0)
    span = int(width.max())
    if span == 0:
        return
    j = torch.arange(span, device=call.pool_out.device)
    cover = j[None, :] < width[:, None]  # [bs, span]
    cell = call.req_pool_indices[:, None] * cols + j[None, :]
    src = starts[:, None] + j[None, :]
    r = torch.arange(bs, device=call.pool_out.device)[:, None].expand_as(cover)
    cells, r_cov, src_cov = cell[cover], r[cover], src[cover]
    uniq, inverse = torch.unique(cells, return_inverse=True)
    owner = torch.full_like(uniq, -1).scatter_reduce(0, inverse, r_cov, reduce="amax")
    wins = (r_cov == owner[inverse]) & (src_cov >= 0) & (src_cov < ntok)
    call.pool_out.view(-1)[cells[wins]] = call.flat_in[src_cov[wins]].to(torch.int32)

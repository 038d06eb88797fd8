"""scatter_req_token_ids: copy each request's token ids into its pool row (int32, low 32 bits).

Request ``r`` writes columns ``j < min(offsets[r+1] - offsets[r], pool_cols)`` of row
``req_pool_indices[r]`` from ``flat_in[offsets[r] + j]``. When several requests name the same row, the
last one covering a column owns it; a column whose flat index lies outside ``flat_in`` is not written by
anyone. Rows outside the pool are skipped. Nothing else changes.
"""

from __future__ import annotations

import torch


def scatter_req_token_ids(
    *, flat_in: torch.Tensor, offsets: torch.Tensor, req_pool_indices: torch.Tensor, pool_out: torch.Tensor
) -> None:
    bs = req_pool_indices.shape[0]
    ntok = flat_in.shape[0]
    if bs == 0 or ntok == 0:
        return
    rows, cols = pool_out.shape
    starts = offsets[:bs]
    width = torch.clamp(torch.minimum(offsets[1 : bs + 1] - starts, torch.tensor(cols, device=starts.device)), min=0)
    row_ok = (req_pool_indices >= 0) & (req_pool_indices < rows)
    width = torch.where(row_ok, width, 0)
    span = int(width.max())
    if span == 0:
        return
    j = torch.arange(span, device=pool_out.device)
    cover = j[None, :] < width[:, None]  # [bs, span]
    cell = req_pool_indices[:, None] * cols + j[None, :]
    src = starts[:, None] + j[None, :]
    r = torch.arange(bs, device=pool_out.device)[:, None].expand_as(cover)
    cells, r_cov, src_cov = cell[cover], r[cover], src[cover]
    uniq, inverse = torch.unique(cells, return_inverse=True)
    owner = torch.full_like(uniq, -1).scatter_reduce(0, inverse, r_cov, reduce="amax")
    wins = (r_cov == owner[inverse]) & (src_cov >= 0) & (src_cov < ntok)
    pool_out.view(-1)[cells[wins]] = flat_in[src_cov[wins]].to(torch.int32)

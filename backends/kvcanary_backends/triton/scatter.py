"""scatter_req_token_ids: copy each request's token ids into its pool row (int32, low 32 bits).

Request ``r`` covers columns ``j < width[r] = clamp(min(offsets[r+1] - offsets[r], cols), 0)`` (the exact
difference, never a wrapped one) of row ``req_pool_indices[r]`` (0 for a row outside the pool). When several
requests name one row, the last one covering a column owns it, so program row ``r`` writes only columns
``j >= max(width[r'])`` over the later requests ``r' > r`` naming the same row (a scan of the later requests,
O(bs) per program), and only where ``offsets[r] + j`` lies inside ``flat_in``. Grid ``(bs, tiles)`` from
shapes only; a program strides over the column tiles of its request.
"""

from __future__ import annotations

import triton.language as tl

from kvcanary.ops.scatter import SCATTER, ScatterLaunch
from kvcanary_backends.triton._jit import (
    TUNING,
    LaunchArgs,
    Launcher,
    PreparedLaunch,
    cdiv,
    device_fn,
    kernel,
    nothing,
    type_key,
)


@device_fn
def covered(a: tl.tensor, b: tl.tensor, cols: tl.tensor) -> tl.tensor:
    """Columns a request with offsets ``[a, b)`` covers: ``clamp(min(b - a, cols), 0)`` of the exact difference
    (where ``b > a``, a wrapped ``b - a`` is negative only when the exact one exceeds INT64_MAX >= cols)."""
    d = b - a
    return tl.where(b <= a, 0, tl.where(d < 0, cols, tl.minimum(d, cols)))


@kernel()
def _scatter_kernel(
    flat: tl.tensor, offsets: tl.tensor, rpi: tl.tensor, pool: tl.tensor,
    bs: tl.tensor, num_tokens: tl.tensor, rows: tl.tensor, cols: tl.tensor,
    BLOCK: tl.constexpr, ROW_BLOCK: tl.constexpr,
) -> None:
    r = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1).to(tl.int64)
    ntiles = tl.num_programs(1).to(tl.int64)
    rp = tl.load(rpi + r)
    start = tl.load(offsets + r)
    width = tl.where((rp >= 0) & (rp < rows), covered(start, tl.load(offsets + r + 1), cols), 0)
    if width > 0:
        later = tl.zeros((ROW_BLOCK,), tl.int64)
        rl = tl.arange(0, ROW_BLOCK).to(tl.int64)
        for c in range(r + 1, bs, ROW_BLOCK):
            rr = c + rl
            mm = rr < bs
            same = mm & (tl.load(rpi + rr, mask=mm, other=-1) == rp)
            a = tl.load(offsets + rr, mask=same, other=0)
            b = tl.load(offsets + rr + 1, mask=same, other=0)
            later = tl.maximum(later, tl.where(same, covered(a, b, cols), 0))
        owned_from = tl.max(later, 0)
        lanes = tl.arange(0, BLOCK).to(tl.int64)
        for c0 in range(tile * BLOCK, width, ntiles * BLOCK):
            j = c0 + lanes
            src = start + j
            ok = (j < width) & (j >= owned_from) & (src >= 0) & (src < num_tokens)
            v = tl.load(flat + tl.where(ok, src, 0), mask=ok, other=0)
            tl.store(pool + rp * cols + j, v.to(tl.int32), mask=ok)


_LAUNCH = Launcher(_scatter_kernel)


def _launch_args(call: ScatterLaunch) -> LaunchArgs | None:
    """(grid, variant key, arguments, constexprs, warps) of the launch of ``call``; None: nothing to launch."""
    bs = int(call.req_pool_indices.shape[0])
    num_tokens = int(call.flat_in.shape[0])
    rows, cols = int(call.pool_out.shape[0]), int(call.pool_out.shape[1])
    if bs == 0 or num_tokens == 0 or rows == 0 or cols == 0:
        return None
    block = TUNING["scatter_block"]
    grid = (bs, max(1, min(cdiv(cols, block), TUNING["scatter_max_tiles"])))
    args = (call.flat_in, call.offsets, call.req_pool_indices, call.pool_out, bs, num_tokens, rows, cols)
    return grid, type_key(args), args, (block, TUNING["scatter_row_block"]), 4


def prepare(call: ScatterLaunch) -> PreparedLaunch | None:
    """The launch of ``call`` with its arguments bound (:meth:`Launcher.prepare`)."""
    a = _launch_args(call)
    return nothing if a is None else _LAUNCH.prepare(*a)


@SCATTER.kernel("triton", notes="one program row per request; last writer wins", prepare=prepare)
def scatter_req_token_ids(call: ScatterLaunch) -> None:
    """Launch the scatter (capture-safe; nothing runs for an empty batch or an empty ``flat_in``: shapes)."""
    a = _launch_args(call)
    if a is not None:
        _LAUNCH(*a)

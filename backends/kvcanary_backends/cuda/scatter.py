"""scatter_req_token_ids: ``kernels/scatter.cu`` (semantics: backends/torch_ref/scatter.py).

Grid ``(bs, Y)``: one block row per request, ``Y`` blocks splitting its columns (more when the batch is small);
every size comes from shapes, so the launch is capturable. Nothing is launched when nothing can be written.
"""

from __future__ import annotations

from kvcanary.ops.scatter import SCATTER, ScatterLaunch
from kvcanary_backends.cuda import notes
from kvcanary_backends.cuda._pack import Args, KernelCache, Launch, Shape, prepare_launch
from kvcanary_backends.cuda._toolchain import Spec, cdiv

THREADS = 256
COLUMNS_PER_BLOCK = 1024  # 4 per thread: one round of 4 loads in flight

Key = tuple[()]
Sizes = tuple[int, int, int, int]  # bs, num_tokens, pool rows, pool columns


def spec() -> Spec:
    return Spec("scatter.cu", "kvc_scatter", (), THREADS)


KERNELS = KernelCache(spec, preload=[()])


def split(bs: int, cols: int, num_tokens: int) -> int:
    """Blocks per request: enough to cover its widest possible row, fewer when the batch alone fills the GPU."""
    want = cdiv(min(cols, num_tokens), COLUMNS_PER_BLOCK)
    return max(1, min(want, max(1, 8192 // max(bs, 1)), 65535))


def pack(call: ScatterLaunch) -> tuple[Key, Sizes, Args]:
    """(specialization key, sizes, kernel arguments) of one launch."""
    bs = call.req_pool_indices.shape[0]
    ntok = call.flat_in.shape[0]
    rows, cols = call.pool_out.shape
    args = (call.flat_in.data_ptr(), ntok, call.offsets.data_ptr(), call.req_pool_indices.data_ptr(), bs,
            call.pool_out.data_ptr(), rows, cols)
    return (), (bs, ntok, rows, cols), args


def shape(key: Key, sizes: Sizes, max_blocks: int) -> Shape | None:
    """(grid x, grid y, threads, shared bytes), or None when nothing can be written (the reference returns)."""
    bs, ntok, rows, cols = sizes
    if bs == 0 or ntok == 0 or rows == 0 or cols == 0:
        return None
    return bs, split(bs, cols, ntok), THREADS, 0


def prepare(call: ScatterLaunch) -> Launch:
    """The launch of ``call``, packed once (:attr:`kvcanary.registry.OpSupport.prepare`)."""
    key, sizes, args = pack(call)
    return prepare_launch(KERNELS, call.pool_out.get_device(), key, sizes, args, shape)


@KERNELS.kernel(SCATTER, notes=notes(), prepare=prepare)
def scatter_req_token_ids(call: ScatterLaunch) -> None:
    prepare(call)()

"""CUDA C++ floor probes, compiled and launched exactly like the cuda backend's kernels (GPU only).

Why beside benchmarks/floors.py's Triton probes: a ratio is fair when the floor and the figure share the
compiler, the load width and the launch path. These probes (benchmarks/floors_probes.cu) are built by NVRTC
through backends.cuda._toolchain and launched through cuda.core like the kernels:

- ``empty_launch_cuda()``: one empty-kernel launch: host time, eager (host + GPU) and in a CUDA graph (GPU);
- ``serial_step_floor_cuda(steps)``: seconds per dependent mix3 step with every operand in registers (kernel
  parameters: ptxas runs it on the uniform datapath), ``serial_vector_step_cuda`` the same chain started from
  values loaded from memory (the vector datapath, where any chain over loaded tokens runs), and
  ``serial_loads_step_cuda`` with each step's inputs loaded inside the loop (what prefetching avoids);
- ``gather_floor_cuda(buf, sets)``: the two-record random gather (16 B of indices in, 8 B out) over the given
  (slots, predecessors) index sets, 16-byte loads, U = 1, 2, 4 or 8 entries per thread with every load of a
  thread issued before any use; the fastest U is the floor (``gather_floor_cuda_detail`` says which);
- ``gather_rkv_floor_cuda``: the same plus the real-KV strips verify reads, without hashing;
- ``dependent_loads_cuda``: only the dependent loads and the store of one-token writes;
- ``plan_stream_cuda``: a plain stream of the fused plan's traffic;
- ``sglang_shape_write_cuda``: not a floor but the head-to-head's other side, a write shaped like SGLang's
  published kernel (benchmarks/sglang_shape.cu), its records checked equal to the backends'.

Timing is benchmarks/timing.py's: :func:`~benchmarks.timing.events` over launches issued back to back (GPU
time whenever a launch takes longer on the GPU than on the host), :func:`~benchmarks.timing.graph` for
launches shorter than their host cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from benchmarks import timing
from kvcanary.context import VerifyOrWriteContext
from kvcanary.plans import WritePlan
from kvcanary_backends.cuda._pack import fold
from kvcanary_backends.cuda._toolchain import Compiled, Spec, cdiv, launch, load

PROBE_DIR = Path(__file__).resolve().parent  # floors_probes.cu


def probe(entry: str, threads: int = 256) -> Compiled:
    return load(Spec("floors_probes.cu", entry, (), threads, extra_include=str(PROBE_DIR)),
                torch.cuda.current_device())


def _launch(kernel: Compiled, shape: tuple[int, int, int, int], *args: int) -> None:
    launch(kernel, torch.cuda.current_device(), shape, args)


# -- probes ---------------------------------------------------------------------------------------------------
def empty_launch_cuda() -> dict[str, float]:
    """Seconds per empty-kernel launch: host time, eager back-to-back (GPU-visible), and graph-replayed."""
    k = probe("kvc_probe_empty", 32)

    def one() -> None:
        _launch(k, (1, 1, 32, 0), 0)

    return {"host": timing.wall(one, calls=2000), "eager": timing.events([one] * 200),
            "graph": timing.graph(one, rounds=200)}


def dependent_loads_cuda(offs: torch.Tensor, seeds: torch.Tensor, ids: torch.Tensor, locs: torch.Tensor,
                         recs: torch.Tensor, *, warps_per_block: int = 8) -> float:
    """GPU seconds (graph-replayed) of a launch that does only a one-token write's dependent loads: per request,
    offset and seed, then the seed record's hash, the token and the slot, then one store at that slot."""
    k = probe("kvc_probe_dep2", 32 * warps_per_block)
    n = seeds.shape[0]
    out = torch.zeros_like(recs)
    grid = max(1, cdiv(n, warps_per_block))
    return timing.graph(lambda: _launch(k, (grid, 1, 32 * warps_per_block, 0), offs.data_ptr(), seeds.data_ptr(),
                                        ids.data_ptr(), locs.data_ptr(), recs.data_ptr(), out.data_ptr(), n),
                        rounds=100)


def dependent_loads_kv_cuda(offs: torch.Tensor, seeds: torch.Tensor, ids: torch.Tensor, locs: torch.Tensor,
                            recs: torch.Tensor, strips: Sequence[torch.Tensor], *, stride: int,
                            warps_per_block: int = 8) -> float:
    """GPU seconds (graph-replayed) of :func:`dependent_loads_cuda`'s launch plus, at the loaded slot, one
    256-byte strip of each of ``strips`` (at most 4 byte buffers, ``stride`` bytes a slot, a strip a warp):
    the dependent rounds of a one-token write with real-KV PARTIAL."""
    if not 1 <= len(strips) <= 4 or stride < 256:
        raise ValueError(f"strips: 1 to 4 sources of at least 256 bytes a slot, not {len(strips)} x {stride}")
    k = probe("kvc_probe_dep3", 32 * warps_per_block)
    n = seeds.shape[0]
    out = torch.zeros_like(recs)
    ptrs = [t.data_ptr() for t in strips] + [strips[0].data_ptr()] * (4 - len(strips))
    grid = max(1, cdiv(n, warps_per_block))
    return timing.graph(lambda: _launch(k, (grid, 1, 32 * warps_per_block, 0), offs.data_ptr(), seeds.data_ptr(),
                                        ids.data_ptr(), locs.data_ptr(), recs.data_ptr(), out.data_ptr(), n, *ptrs,
                                        len(strips), stride), rounds=100)


def serial_step_floor_cuda(steps: int = 1 << 15) -> float:
    """Seconds per dependent mix3 step, every operand in registers (one thread)."""
    k = probe("kvc_probe_serial", 32)
    out = torch.empty(1, dtype=torch.int64, device="cuda")
    return timing.events(lambda: _launch(k, (1, 1, 32, 0), out.data_ptr(), steps, 12345), reps=10) / steps


def serial_vector_step_cuda(steps: int = 1 << 15) -> float:
    """Seconds per dependent mix3 step in registers, started from per-lane values loaded from memory (the
    vector datapath: the floor of any chain over tokens read from memory, see floors_probes.cu)."""
    k = probe("kvc_probe_serial_vector", 32)
    io = torch.randint(0, 1 << 40, (96,), dtype=torch.int64, device="cuda")
    return timing.events(lambda: _launch(k, (1, 1, 32, 0), io.data_ptr(), steps), reps=10) / steps


def serial_loads_step_cuda(steps: int = 1 << 15) -> float:
    """Seconds per mix3 step whose token and position are loaded inside the loop."""
    k = probe("kvc_probe_serial_loads", 32)
    toks = torch.randint(0, 50000, (steps,), device="cuda")
    poss = torch.arange(steps, device="cuda")
    out = torch.empty(1, dtype=torch.int64, device="cuda")
    return timing.events(lambda: _launch(k, (1, 1, 32, 0), out.data_ptr(), toks.data_ptr(), poss.data_ptr(), steps),
                         reps=10) / steps


GATHER_UNROLLS = (1, 2, 4, 8)
RKV_UNROLLS = (1, 2, 4)


def _fastest_unroll(name: str, unrolls: Sequence[int], buf: torch.Tensor,
                    sets: Sequence[tuple[torch.Tensor, torch.Tensor]], *tail: int) -> tuple[float, int]:
    """(seconds, U) of the fastest ``<name>_u<U>`` probe over ``sets`` (rotated between launches so the
    indices do not sit in L2); each takes (buf, slots, prevs, out, n, stride, *tail)."""
    n = sets[0][0].shape[0]
    out = torch.empty(n, dtype=torch.int64, device="cuda")
    best: tuple[float, int] | None = None
    for u in unrolls:
        k = probe(f"{name}_u{u}")
        fns = [lambda s=s, p=p, k=k, u=u: _launch(k, (max(1, cdiv(n, 256 * u)), 1, 256, 0), buf.data_ptr(),
                                                  s.data_ptr(), p.data_ptr(), out.data_ptr(), n, buf.shape[1], *tail)
               for s, p in sets]
        t = timing.events(fns * 4, reps=10)
        if best is None or t < best[0]:
            best = (t, u)
    assert best is not None
    return best


def gather_floor_cuda_detail(buf: torch.Tensor,
                             sets: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, int]:
    """(seconds per gather, entries per thread of the fastest probe) over ``buf`` (uint8 [slots, stride]),
    gathering exactly the records ``sets`` name."""
    return _fastest_unroll("kvc_probe_gather2", GATHER_UNROLLS, buf, sets)


def gather_floor_cuda(buf: torch.Tensor, sets: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Seconds per gather of len(slots) entries over ``buf`` (uint8 [slots, stride]); ``sets`` rotate."""
    return gather_floor_cuda_detail(buf, sets)[0]


def gather_rkv_floor_cuda(buf: torch.Tensor, sets: Sequence[tuple[torch.Tensor, torch.Tensor]],
                          sources: Sequence[torch.Tensor], chunks: int) -> float:
    """The gather plus ``chunks`` 16-byte chunks of each source's strip (one slot per row, <= 2 sources);
    the fastest of U = 1, 2, 4 entries per thread."""
    s0 = sources[0].data_ptr()
    s1 = sources[1].data_ptr() if len(sources) > 1 else s0
    row = sources[0].stride(0) * sources[0].element_size()
    return _fastest_unroll("kvc_probe_gather_rkv", RKV_UNROLLS, buf, sets, s0, s1, row, len(sources), chunks)[0]


STREAM_PLAN_VARIANTS = ((4, 1), (16, 1), (2, 2), (8, 2))
"""(rounds per thread U, entries per store W) of the ``kvc_probe_stream_plan_u<U>_w<W>`` probes."""


def plan_stream_cuda(n: int, sets: int = 4) -> dict[str, float]:
    """GPU seconds per plain stream of the plan's traffic over ``n`` entries (one int32 read, four int64
    written per entry), each ``kvc_probe_stream_plan`` variant timed in a CUDA graph over ``sets`` output sets
    in turn (four sets of 1 Mi entries are 128 MiB, more than L2 holds, as in the plan benchmark), by variant
    label ``u<U>w<W>``; ``min`` of the values is the floor."""
    src = torch.randint(0, 1 << 30, (n,), dtype=torch.int32, device="cuda")
    outs = [[torch.empty(n, dtype=torch.int64, device="cuda") for _ in range(4)] for _ in range(sets)]
    times: dict[str, float] = {}
    for u, w in STREAM_PLAN_VARIANTS:
        k = probe(f"kvc_probe_stream_plan_u{u}_w{w}")
        grid = max(1, cdiv(n, 256 * u * w))
        fns = [lambda o=o, k=k, grid=grid: _launch(k, (grid, 1, 256, 0), src.data_ptr(), *(t.data_ptr() for t in o), n)
               for o in outs]
        times[f"u{u}w{w}"] = timing.graph(fns)
    return times


def sglang_shape_write_cuda(ctx: VerifyOrWriteContext, plan: WritePlan, input_ids: torch.Tensor,
                            positions: torch.Tensor, out_cache_loc: torch.Tensor, reference: torch.Tensor
                            ) -> tuple[float, bool]:
    """GPU seconds (graph-replayed) of the SGLang-shaped write of these arguments, and whether the canary
    buffer it leaves equals ``reference`` (the buffer after the backend's launch of the same write, from the
    same starting buffer). Runs on ``ctx.canary_buf`` in place."""
    nsrc, partial, src_args = fold(ctx)
    k = load(Spec("sglang_shape.cu", "kvc_shape_write_serial", (("KVC_NSRC", nsrc), ("KVC_PARTIAL", int(partial))),
                  1, extra_include=str(PROBE_DIR)), torch.cuda.current_device())
    buf = ctx.canary_buf
    grid = max(1, plan.write_seed_slot_indices.shape[0])
    args = (buf.data_ptr(), buf.stride(0) * buf.element_size(), plan.write_offsets.data_ptr(),
            plan.write_seed_slot_indices.data_ptr(), plan.write_num_valid_reqs.data_ptr(), input_ids.data_ptr(),
            positions.data_ptr(), out_cache_loc.data_ptr(), ctx.enable_chain_position_assert.data_ptr(),
            ctx.violation_ring.data_ptr(), ctx.violation_ring.shape[0], ctx.violation_write_index.data_ptr(),
            ctx.slot_run_counter.data_ptr(), ctx.kernel_run_counter.data_ptr(), int(ctx.kernel_kind), *src_args)

    def one() -> None:
        _launch(k, (grid, 1, 1, 0), *args)

    one()
    torch.cuda.synchronize()
    same = bool(torch.equal(buf, reference))
    return timing.graph(one, rounds=100), same

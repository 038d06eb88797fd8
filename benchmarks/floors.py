"""Hardware floors, measured in the same run as the figures compared with them (GPU only).

- ``copy_bandwidth()``: device-to-device copy, bytes read + written per second.
- ``gather_floor(n)``: a random gather of two 32-byte records per entry (16 B of indices in, 8 B out), the
  least memory traffic a verify of ``n`` entries can do; returns seconds.
- ``gather_floor_for(buf, slots, prevs)``: the same gather over *given* index arrays (a verify plan's slots
  and predecessors, over its canary buffer), so a verify and its floor read exactly the same records and hit
  the caches alike (a chained plan's predecessor is the previous entry's slot: mostly a cache hit).
- ``serial_step_floor(steps)``: seconds per serial mix3 chain step with every operand in registers (the
  write chain's dependency floor).
- ``empty_launch()``: seconds per eager launch of an empty Triton kernel (host launch cost included);
  ``empty_launch_graph()``: the same kernel replayed from a CUDA graph (the device-side floor).

Probes are Triton kernels, timed with CUDA events (median of many repetitions, inputs rotated so they do
not sit in L2).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - floors need a GPU stack
    triton = None


def time_cuda(fn: Callable[[], object], *, warmup: int = 5, reps: int = 30) -> float:
    """Median seconds of ``fn`` timed with CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times: list[float] = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def copy_bandwidth(nbytes: int = 1 << 31) -> float:
    """Bytes per second (read + written) of a large device-to-device copy."""
    a = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    t = time_cuda(lambda: b.copy_(a))
    return nbytes / t


if triton is not None:

    @triton.jit  # type: ignore[untyped-decorator]
    def _gather2_kernel(buf: tl.tensor, slots: tl.tensor, prevs: tl.tensor, out: tl.tensor, n: tl.tensor,
                        stride_words: tl.tensor, BLOCK: tl.constexpr) -> None:
        # each record is loaded as one 32-byte row of 4 int64 (vectorized), for the slot and its predecessor
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        s = tl.load(slots + offs, mask=m, other=0)
        p = tl.load(prevs + offs, mask=m, other=0)
        f = tl.arange(0, 4)
        a = tl.load(buf + s[:, None] * stride_words + f[None, :], mask=m[:, None], other=0)
        b = tl.load(buf + p[:, None] * stride_words + f[None, :], mask=m[:, None], other=0)
        tl.store(out + offs, tl.xor_sum(a ^ b, axis=1), mask=m)

    @triton.jit  # type: ignore[untyped-decorator]
    def _gather_same_kernel(words: tl.tensor, slots: tl.tensor, prevs: tl.tensor, out: tl.tensor, n: tl.tensor,
                            stride_words: tl.tensor, BLOCK: tl.constexpr) -> None:
        # as _gather2_kernel, over a plan's own indices: a predecessor <= 0 (chain head, check skipped) is
        # not read, as verify does not read it
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        s = tl.load(slots + offs, mask=m, other=0)
        p = tl.load(prevs + offs, mask=m, other=0)
        f = tl.arange(0, 4)
        sm = m & (s > 0)
        pm = m & (p > 0)
        a = tl.load(words + s[:, None] * stride_words + f[None, :], mask=sm[:, None], other=0)
        b = tl.load(words + p[:, None] * stride_words + f[None, :], mask=pm[:, None], other=0)
        tl.store(out + offs, tl.xor_sum(a ^ b, axis=1), mask=m)

    @triton.jit  # type: ignore[untyped-decorator]
    def _serial_kernel(out: tl.tensor, steps: tl.tensor, seed: tl.tensor) -> None:
        h = seed.to(tl.uint64)
        tok = (seed * 3 + 1).to(tl.uint64)
        pos = (seed * 5 + 7).to(tl.uint64)
        for _ in range(steps):
            for _r in tl.static_range(3):
                x = h ^ tok
                x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
                x = (x ^ (x >> 27)) * 0x94D049BB133111EB
                h = x ^ (x >> 31)
                tok = tok ^ pos
        tl.store(out, h.to(tl.int64, bitcast=True))

    @triton.jit  # type: ignore[untyped-decorator]
    def _empty_kernel(out: tl.tensor) -> None:
        pass


def gather_floor(n: int, buf_bytes: int = 1 << 31, sets: int = 4) -> float:
    """Seconds for the two-record random gather of ``n`` entries over a ``buf_bytes`` canary buffer."""
    slots_n = buf_bytes // 32
    buf = torch.randint(0, 1 << 62, (slots_n * 4,), dtype=torch.int64, device="cuda")
    idx = [(torch.randint(0, slots_n, (n,), device="cuda"), torch.randint(0, slots_n, (n,), device="cuda"))
           for _ in range(sets)]
    out = torch.empty(n, dtype=torch.int64, device="cuda")
    block = 1024
    k = [0]

    def run() -> None:
        s, p = idx[k[0] % sets]
        k[0] += 1
        _gather2_kernel[(triton.cdiv(n, block),)](buf, s, p, out, n, 4, BLOCK=block)

    return time_cuda(run)


def gather_floor_for(buf: torch.Tensor, slots: torch.Tensor | Sequence[torch.Tensor],
                     prevs: torch.Tensor | Sequence[torch.Tensor]) -> float:
    """Seconds for one gather of the records ``slots[i]`` and ``prevs[i]`` (where > 0) of ``buf``.

    ``buf`` is the canary buffer (``[num_slots, 32]`` bytes, or any tensor whose rows are 32-byte records);
    ``slots`` / ``prevs`` are one index set (int64) or several of equal length, rotated between repetitions
    like the figure they are the floor of (so the index arrays do not sit in L2). 16 B of indices in and
    8 B out per entry, as ``gather_floor``.
    """
    s_sets = [slots] if isinstance(slots, torch.Tensor) else list(slots)
    p_sets = [prevs] if isinstance(prevs, torch.Tensor) else list(prevs)
    if len(s_sets) != len(p_sets) or not s_sets:
        raise ValueError("gather_floor_for: one predecessor array per slot array")
    words = buf.view(torch.int64)
    words = words.view(words.shape[0], -1)
    stride_words = int(words.stride(0))
    n = int(s_sets[0].shape[0])
    out = torch.empty(n, dtype=torch.int64, device=buf.device)
    block = 1024
    k = [0]

    def run() -> None:
        i = k[0] % len(s_sets)
        k[0] += 1
        _gather_same_kernel[(triton.cdiv(n, block),)](words, s_sets[i], p_sets[i], out, n, stride_words, BLOCK=block)

    return time_cuda(run)


def serial_step_floor(steps: int = 1 << 15) -> float:
    """Seconds per dependent mix3 step (three splitmix64 rounds), registers only."""
    out = torch.empty(1, dtype=torch.int64, device="cuda")
    t = time_cuda(lambda: _serial_kernel[(1,)](out, steps, 12345), reps=10)
    return t / steps


def empty_launch_graph(n: int = 256) -> float:
    """Seconds per empty kernel when ``n`` of them are replayed from one CUDA graph (GPU-side floor)."""
    out = torch.empty(1, device="cuda")
    _empty_kernel[(1,)](out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            _empty_kernel[(1,)](out)
    return time_cuda(graph.replay, reps=20) / n


def empty_launch() -> float:
    """Seconds of one eager launch of an empty kernel (the launch-bound floor)."""
    out = torch.empty(1, device="cuda")
    reps = 200

    def many() -> None:
        for _ in range(reps):
            _empty_kernel[(1,)](out)

    return time_cuda(many, reps=10) / reps


def report(name: str, seconds: float, floor: float, unit: str = "us", what: str = "") -> str:
    """One line: the figure, the floor, and the ratio figure/floor (1.0 = at the floor)."""
    scale = {"us": 1e6, "ms": 1e3, "ns": 1e9}[unit]
    return (f"{name:<48} {seconds * scale:10.2f} {unit}   floor {floor * scale:10.2f} {unit}   "
            f"ratio {seconds / floor:6.2f}x  {what}")

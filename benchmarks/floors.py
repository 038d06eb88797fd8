"""Hardware floors, measured in the same run as the figures compared with them.

- ``copy_bandwidth(device)``: bytes read + written per second of a large copy, on the CPU or a GPU (the floor
  of every figure that moves bytes).
- ``gather_floor(n)``: a random gather of two 32-byte records per entry (16 B of indices in, 8 B out), the
  least memory traffic a verify of ``n`` entries can do; returns seconds.
- ``gather_floor_for(buf, slots, prevs)``: the same gather over *given* index arrays (a verify plan's slots
  and predecessors, over its canary buffer), so a verify and its floor read exactly the same records and hit
  the caches alike (a chained plan's predecessor is the previous entry's slot: mostly a cache hit).
- ``serial_step_floor(steps)``: seconds per serial mix3 chain step with every operand in registers (the
  write chain's dependency floor).
- ``empty_launch()``: seconds per eager launch of an empty Triton kernel (host launch cost included);
  ``empty_launch_graph()``: the same kernel replayed from a CUDA graph (the device-side floor);
- ``common(report)``: the copy, serial step and empty launches at once, recorded in a report.

All but the copy are Triton kernels (GPU only; :data:`TRITON` says whether Triton imported), timed with
benchmarks/timing.py, index sets rotated so they do not sit in L2. The CUDA C++ probes, built and launched
like the cuda backend's kernels, are in floors_cuda.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import torch

from benchmarks import timing
from benchmarks.report import Report

try:
    import triton
    import triton.language as tl

    from kvcanary_backends.triton._hash import splitmix64
except ImportError:  # pragma: no cover - the Triton probes need a GPU stack
    triton = None

TRITON = triton is not None


def copy_bandwidth(device: torch.device | str = "cuda", nbytes: int | None = None) -> float:
    """Bytes per second (read + written) of a copy of ``nbytes`` / 2 bytes (default 2 GiB moved on a GPU,
    256 MiB on the CPU)."""
    dev = torch.device(device)
    nbytes = nbytes or (1 << 31 if dev.type == "cuda" else 1 << 28)
    a = torch.ones(nbytes // 2, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    return nbytes / timing.device_time(lambda: b.copy_(a), dev, reps=10 if dev.type == "cuda" else 5, warmup=1)


def _need_triton() -> None:
    if triton is None:
        raise RuntimeError("the Triton floor probes need Triton (pip install triton) and a CUDA device")


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
                h = splitmix64(h ^ tok)  # the kernels' own splitmix64 (one copy per language)
                tok = tok ^ pos
        tl.store(out, h.to(tl.int64, bitcast=True))

    @triton.jit  # type: ignore[untyped-decorator]
    def _empty_kernel(out: tl.tensor) -> None:
        pass


def gather_floor(n: int, buf_bytes: int = 1 << 31, sets: int = 4) -> float:
    """Seconds for the two-record random gather of ``n`` entries over a ``buf_bytes`` canary buffer."""
    _need_triton()
    slots_n = buf_bytes // 32
    buf = torch.randint(0, 1 << 62, (slots_n * 4,), dtype=torch.int64, device="cuda")
    idx = [(torch.randint(0, slots_n, (n,), device="cuda"), torch.randint(0, slots_n, (n,), device="cuda"))
           for _ in range(sets)]
    out = torch.empty(n, dtype=torch.int64, device="cuda")
    block = 1024

    def run(s: torch.Tensor, p: torch.Tensor) -> None:
        _gather2_kernel[(triton.cdiv(n, block),)](buf, s, p, out, n, 4, BLOCK=block)

    return timing.events([partial(run, s, p) for s, p in idx], reps=30, warmup=5)


def gather_floor_for(buf: torch.Tensor, slots: torch.Tensor | Sequence[torch.Tensor],
                     prevs: torch.Tensor | Sequence[torch.Tensor]) -> float:
    """Seconds for one gather of the records ``slots[i]`` and ``prevs[i]`` (where > 0) of ``buf``.

    ``buf`` is the canary buffer (``[num_slots, 32]`` bytes, or any tensor whose rows are 32-byte records);
    ``slots`` / ``prevs`` are one index set (int64) or several of equal length, rotated between repetitions
    like the figure they are the floor of (so the index arrays do not sit in L2). 16 B of indices in and
    8 B out per entry, as ``gather_floor``.
    """
    _need_triton()
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

    def run(s: torch.Tensor, p: torch.Tensor) -> None:
        _gather_same_kernel[(triton.cdiv(n, block),)](words, s, p, out, n, stride_words, BLOCK=block)

    return timing.events([partial(run, s, p) for s, p in zip(s_sets, p_sets, strict=True)], reps=30, warmup=5)


def serial_step_floor(steps: int = 1 << 15) -> float:
    """Seconds per dependent mix3 step (three splitmix64 rounds), registers only."""
    _need_triton()
    out = torch.empty(1, dtype=torch.int64, device="cuda")
    return timing.events(lambda: _serial_kernel[(1,)](out, steps, 12345), reps=10) / steps


def empty_launch_graph(n: int = 256) -> float:
    """Seconds per empty kernel when ``n`` of them are replayed from one CUDA graph (GPU-side floor)."""
    _need_triton()
    out = torch.empty(1, device="cuda")
    return timing.graph(lambda: _empty_kernel[(1,)](out), rounds=n)


def empty_launch() -> float:
    """Seconds of one eager launch of an empty kernel (the launch-bound floor)."""
    _need_triton()
    out = torch.empty(1, device="cuda")
    return timing.events([lambda: _empty_kernel[(1,)](out)] * 200, reps=10)


@dataclass(frozen=True)
class Common:
    """The floors most GPU benchmarks compare with, in bytes per second and seconds."""

    copy_bandwidth: float
    serial_step: float
    empty_launch: float
    empty_launch_graph: float


def common(report: Report, device: torch.device | str = "cuda") -> Common:
    """Copy bandwidth, Triton's serial mix3 step and empty launches (eager, graph), measured now and recorded
    in ``report``'s details."""
    c = Common(copy_bandwidth(device), serial_step_floor(), empty_launch(), empty_launch_graph())
    report.floor("copy bandwidth (B/s, read + written)", c.copy_bandwidth, "device-to-device copy")
    report.floor("serial mix3 step (s)", c.serial_step, "Triton probe, registers only")
    report.floor("empty launch, eager (s)", c.empty_launch, "Triton probe, host launch cost included")
    report.floor("empty launch, in a CUDA graph (s)", c.empty_launch_graph, "Triton probe")
    return c

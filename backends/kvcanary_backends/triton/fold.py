"""fold: the tensor-parallel digest fold in one launch (semantics: backends/torch_ref/fold.py).

Adds ``(Σ mix(slot, token, position, prev_hash), count)`` over the records at ``slots`` (entries <= 0 left
out) to an ``int64 [2]`` accumulator on the device, bit for bit what the torch-ops fold adds: every mix is
splitmix64 on uint64 (wrapping multiplies), the sum wraps. A persistent grid (its size from the slots'
length only) strides over the slots; each program sums its share in registers and adds it to the
accumulator with one int64 atomic per word (integer sums are exact, so the order the programs land in does
not change the result). No host read, no allocation: the launch can be captured in a CUDA graph.

A slot past the buffer is not read (its fields count as 0), in the torch-ops fold as well.
"""

from __future__ import annotations

import triton.language as tl

from kvcanary.consts import CANARY_FIELD_POSITION, CANARY_FIELD_PREV_HASH, CANARY_FIELD_TOKEN
from kvcanary.ops.fold import FOLD, FoldLaunch
from kvcanary_backends.triton._hash import as_i64, as_u64, splitmix64
from kvcanary_backends.triton._jit import (
    TUNING,
    LaunchArgs,
    Launcher,
    PreparedLaunch,
    cdiv,
    fits32,
    kernel,
    persistent_grid,
)

SLOT_SALT = tl.constexpr(0x9E3779B97F4A7C15)
"""XOR-ed into a slot number before its first splitmix64 round (as uint64)."""
F_TOKEN = tl.constexpr(CANARY_FIELD_TOKEN)
F_POSITION = tl.constexpr(CANARY_FIELD_POSITION)
F_PREV = tl.constexpr(CANARY_FIELD_PREV_HASH)


@kernel()
def _fold_kernel(
    buf: tl.tensor, stride_words: tl.tensor, num_slots: tl.tensor,
    slots: tl.tensor, slot_stride: tl.tensor, n: tl.tensor, acc: tl.tensor,
    BLOCK: tl.constexpr,
) -> None:
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    rec = buf.to(tl.pointer_type(tl.int64))
    lanes = tl.arange(0, BLOCK).to(tl.int64)
    total = tl.zeros((BLOCK,), tl.uint64)
    count = tl.zeros((BLOCK,), tl.int64)
    for start in range(pid.to(tl.int64) * BLOCK, n, nprog.to(tl.int64) * BLOCK):
        e = start + lanes
        m = e < n
        slot = tl.load(slots + e * slot_stride, mask=m, other=0).to(tl.int64)
        live = m & (slot > 0)
        rd = live & (slot < num_slots)
        base = tl.where(rd, slot, 0) * stride_words
        tok = tl.load(rec + base + F_TOKEN, mask=rd, other=0)
        pos = tl.load(rec + base + F_POSITION, mask=rd, other=0)
        prev = tl.load(rec + base + F_PREV, mask=rd, other=0)
        h = splitmix64(as_u64(slot) ^ SLOT_SALT)
        h = splitmix64(h ^ as_u64(tok))
        h = splitmix64(h ^ as_u64(pos))
        h = splitmix64(h ^ as_u64(prev))
        total += tl.where(live, h, tl.zeros((BLOCK,), tl.uint64))
        count += live.to(tl.int64)
    tl.atomic_add(acc, as_i64(tl.sum(total, axis=0)))
    tl.atomic_add(acc + 1, tl.sum(count, axis=0))


_LAUNCH = Launcher(_fold_kernel)


def _launch_args(call: FoldLaunch) -> LaunchArgs:
    """(grid, variant key, arguments, constexprs, warps) of the launch of ``call``."""
    acc, canary_buf, slots = call.acc, call.canary_buf, call.slots
    n = int(slots.shape[0])
    num_slots = int(canary_buf.shape[0])
    stride_words = int(canary_buf.stride(0)) * canary_buf.element_size() // 8  # rows apart, in int64 words
    slot_stride = int(slots.stride(0))
    block = TUNING["digest_block"]
    grid = (persistent_grid(slots.device, cdiv(n, block), TUNING["digest_waves"]),)
    key = (canary_buf.dtype, slots.dtype, acc.dtype,
           fits32(stride_words), fits32(num_slots), fits32(slot_stride), fits32(n))
    return (grid, key, (canary_buf, stride_words, num_slots, slots, slot_stride, n, acc), (block,),
            TUNING["digest_warps"])


def prepare(call: FoldLaunch) -> PreparedLaunch | None:
    """The launch of ``call`` with its arguments bound (:meth:`Launcher.prepare`)."""
    return _LAUNCH.prepare(*_launch_args(call))


@FOLD.kernel("triton", notes="persistent grid over the slots; one int64 atomic per word and program", prepare=prepare)
def fold(call: FoldLaunch) -> None:
    """Add the fold of ``canary_buf``'s records at ``slots`` to ``acc`` (the contract has checked all three)."""
    _LAUNCH(*_launch_args(call))

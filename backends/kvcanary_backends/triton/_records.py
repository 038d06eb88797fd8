"""Device functions shared by verify and write: ring appends and the real-KV fold; host packing of sources.

Ring rows are claimed with one atomic per row on ``violation_write_index`` (int32): a row whose claimed
sequence number lies outside ``[0, ring_capacity)`` is dropped but still counted (the ring is fill-once).
Rows of one launch therefore land in an arbitrary order; the final index is exact.

Real-KV sources travel as four fixed argument groups ``(bytes, rows, row_words, page_size, token_words,
fold_words)``; a kernel specialises on how many are live (``NUM_SOURCES``) and unrolls over them at
compile time (a pointer argument cannot be chosen by a loop index), so absent groups are never read (they
are passed as None). A context's arguments are derived once per context (:func:`context_args`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import triton.language as tl

from kvcanary.consts import MAX_REAL_KV_SOURCES, REAL_KV_CHUNK_BYTES, RealKvHashMode
from kvcanary.context import VerifyOrWriteContext
from kvcanary_backends.triton._hash import as_u64, splitmix64
from kvcanary_backends.triton._jit import device_fn, intern_key, type_key


@dataclass(frozen=True)
class ContextArgs:
    """A context's part of a verify / write launch, derived once per context object.

    ``head``: ``(buf, stride_words, num_slots, ring, ring_cap, write_index, slot_counter, kernel_counter,
    [chain_assert,] kind)``; ``sources``: 6 arguments per source slot ``(bytes, rows, row_words, page_size,
    token_words, fold_words)``, None past the live ones (constexpr None: not read, nothing passed);
    ``key``: what of these the compiled variant depends on (see ``_jit.Launcher``).
    """

    key: int
    head: tuple[Any, ...]
    sources: tuple[Any, ...]
    num_sources: int
    partial: bool


def context_args(ctx: VerifyOrWriteContext, *, with_chain_assert: bool) -> ContextArgs:
    """The context's launch arguments. Mode NONE folds nothing (every record's real_kv_hash is 0), so it
    launches with no sources at all. Source bytes go as a uint8 view (the interpreter has no bfloat16; the
    kernel reads them as int64 words)."""
    buf = ctx.canary_buf
    mode = int(ctx.real_kv_hash_mode)
    live = 0 if mode == RealKvHashMode.NONE else len(ctx.real_kv_sources)
    partial = mode == RealKvHashMode.PARTIAL
    srcs: list[Any] = []
    for i in range(MAX_REAL_KV_SOURCES):
        if i < live:
            src = ctx.real_kv_sources[i]
            u8 = src.tensor.view(torch.uint8)
            words = (REAL_KV_CHUNK_BYTES if partial else src.read_bytes) // 8
            srcs += [u8, int(u8.shape[0]), int(u8.stride(0)) // 8, src.page_size, src.num_bytes_per_token // 8,
                     words]
        else:
            srcs += [None] * 6
    ring = ctx.violation_ring
    head: list[Any] = [buf, int(buf.stride(0)) // 8, int(buf.shape[0]), ring, int(ring.shape[0]),
                       ctx.violation_write_index, ctx.slot_run_counter, ctx.kernel_run_counter]
    if with_chain_assert:
        head.append(ctx.enable_chain_position_assert)
    head.append(int(ctx.kernel_kind))
    return ContextArgs(intern_key(type_key([*head, *srcs])), tuple(head), tuple(srcs), live, partial)


@device_fn
def append_rows(ring: tl.tensor, write_index: tl.tensor, ring_cap: tl.tensor, keep: tl.tensor,
                c0: tl.tensor, c1: tl.tensor, c2: tl.tensor, c3: tl.tensor,
                c4: tl.tensor, c5: tl.tensor, c6: tl.tensor, c7: tl.tensor, SEM: tl.constexpr) -> None:
    """Append one row per set lane of ``keep`` (a scalar or a vector); columns broadcast to its shape. ``SEM``:
    the claim's memory order; nothing in a launch reads a row, so "relaxed" suffices and spares the fence that
    an "acq_rel" atomic compiles to (a wait for every store before it). No default: Triton 3.6 fails to compile
    a call that leaves a string constexpr to its default."""
    # Interpreter: a vector mask combined with a scalar bool can carry int64 data, which its atomics reject;
    # comparing with 0 makes it a real bool (free when compiled).
    keep = keep != 0
    seq = tl.atomic_add(write_index + keep.to(tl.int32) * 0, 1, mask=keep, sem=SEM)
    ok = keep & (seq >= 0) & (seq < ring_cap)
    row = ring + tl.where(ok, seq, 0).to(tl.int64) * 8
    tl.store(row + 0, c0, mask=ok)
    tl.store(row + 1, c1, mask=ok)
    tl.store(row + 2, c2, mask=ok)
    tl.store(row + 3, c3, mask=ok)
    tl.store(row + 4, c4, mask=ok)
    tl.store(row + 5, c5, mask=ok)
    tl.store(row + 6, c6, mask=ok)
    tl.store(row + 7, c7, mask=ok)


@device_fn
def fold_one(src: tl.tensor, rows: tl.tensor, row_words: tl.tensor, page_size: tl.tensor, token_words: tl.tensor,
             fold_words: tl.tensor, slot: tl.tensor, mask: tl.tensor, PARTIAL: tl.constexpr
             ) -> tuple[tl.tensor, tl.tensor]:
    """One source's hash of each (non-negative) slot's strip, and whether the strip lies past the tensor.

    A strip outside its source folds as 0 (and is flagged); nothing outside the tensor is read.
    """
    words = src.to(tl.pointer_type(tl.int64))
    row = slot // page_size
    col = slot - row * page_size
    inside = row < rows
    live = mask & inside
    base = row * row_words + col * token_words
    h = (slot * 0).to(tl.uint64)
    if PARTIAL:
        w0 = tl.load(words + base, mask=live, other=0)
        w1 = tl.load(words + base + 1, mask=live, other=0)
        h = splitmix64(h ^ as_u64(w0))
        h = splitmix64(h ^ as_u64(w1))
    else:
        # eight words (two 32-byte sectors) per step, all loaded before any is hashed: one dependent round
        # trip per step instead of one per word; words past fold_words are neither read nor hashed
        # (`!= 0`: the interpreter's vector & scalar-bool mask can carry int64 data; free when compiled)
        for w in range(0, fold_words, 8):
            v0 = tl.load(words + base + w, mask=(live & (w < fold_words)) != 0, other=0)
            v1 = tl.load(words + base + (w + 1), mask=(live & (w + 1 < fold_words)) != 0, other=0)
            v2 = tl.load(words + base + (w + 2), mask=(live & (w + 2 < fold_words)) != 0, other=0)
            v3 = tl.load(words + base + (w + 3), mask=(live & (w + 3 < fold_words)) != 0, other=0)
            v4 = tl.load(words + base + (w + 4), mask=(live & (w + 4 < fold_words)) != 0, other=0)
            v5 = tl.load(words + base + (w + 5), mask=(live & (w + 5 < fold_words)) != 0, other=0)
            v6 = tl.load(words + base + (w + 6), mask=(live & (w + 6 < fold_words)) != 0, other=0)
            v7 = tl.load(words + base + (w + 7), mask=(live & (w + 7 < fold_words)) != 0, other=0)
            h = splitmix64(h ^ as_u64(v0))  # w < fold_words: the loop runs only then
            h = tl.where(w + 1 < fold_words, splitmix64(h ^ as_u64(v1)), h)
            h = tl.where(w + 2 < fold_words, splitmix64(h ^ as_u64(v2)), h)
            h = tl.where(w + 3 < fold_words, splitmix64(h ^ as_u64(v3)), h)
            h = tl.where(w + 4 < fold_words, splitmix64(h ^ as_u64(v4)), h)
            h = tl.where(w + 5 < fold_words, splitmix64(h ^ as_u64(v5)), h)
            h = tl.where(w + 6 < fold_words, splitmix64(h ^ as_u64(v6)), h)
            h = tl.where(w + 7 < fold_words, splitmix64(h ^ as_u64(v7)), h)
    h = tl.where(live, h, 0)
    return h, mask & (row >= rows)


@device_fn
def fold_sources(slot: tl.tensor, mask: tl.tensor,
                 s0: tl.tensor, r0: tl.tensor, w0: tl.tensor, p0: tl.tensor, t0: tl.tensor, n0: tl.tensor,
                 s1: tl.tensor, r1: tl.tensor, w1: tl.tensor, p1: tl.tensor, t1: tl.tensor, n1: tl.tensor,
                 s2: tl.tensor, r2: tl.tensor, w2: tl.tensor, p2: tl.tensor, t2: tl.tensor, n2: tl.tensor,
                 s3: tl.tensor, r3: tl.tensor, w3: tl.tensor, p3: tl.tensor, t3: tl.tensor, n3: tl.tensor,
                 NUM_SOURCES: tl.constexpr, PARTIAL: tl.constexpr) -> tuple[tl.tensor, tl.tensor]:
    """The slot's real_kv_hash (uint64; 0 with no sources) and whether any source's strip was outside it."""
    acc = (slot * 0).to(tl.uint64)
    oob = (slot * 0) != 0
    if NUM_SOURCES > 0:
        h, o = fold_one(s0, r0, w0, p0, t0, n0, slot, mask, PARTIAL)
        acc = splitmix64(acc ^ h)
        oob = oob | o
    if NUM_SOURCES > 1:
        h, o = fold_one(s1, r1, w1, p1, t1, n1, slot, mask, PARTIAL)
        acc = splitmix64(acc ^ h)
        oob = oob | o
    if NUM_SOURCES > 2:
        h, o = fold_one(s2, r2, w2, p2, t2, n2, slot, mask, PARTIAL)
        acc = splitmix64(acc ^ h)
        oob = oob | o
    if NUM_SOURCES > 3:
        h, o = fold_one(s3, r3, w3, p3, t3, n3, slot, mask, PARTIAL)
        acc = splitmix64(acc ^ h)
        oob = oob | o
    return acc, oob


@device_fn
def sources_oob(slot: tl.tensor, mask: tl.tensor,
                r0: tl.tensor, p0: tl.tensor, r1: tl.tensor, p1: tl.tensor,
                r2: tl.tensor, p2: tl.tensor, r3: tl.tensor, p3: tl.tensor,
                NUM_SOURCES: tl.constexpr) -> tl.tensor:
    """Whether any source's strip for the slot lies past that source (geometry only, nothing is read)."""
    oob = (slot * 0) != 0
    if NUM_SOURCES > 0:
        oob = oob | (mask & (slot // p0 >= r0))
    if NUM_SOURCES > 1:
        oob = oob | (mask & (slot // p1 >= r1))
    if NUM_SOURCES > 2:
        oob = oob | (mask & (slot // p2 >= r2))
    if NUM_SOURCES > 3:
        oob = oob | (mask & (slot // p3 >= r3))
    return oob


@device_fn
def partial_strip(src: tl.tensor, rows: tl.tensor, row_words: tl.tensor, page_size: tl.tensor,
                  token_words: tl.tensor, slot: tl.tensor, mask: tl.tensor, VOLATILE: tl.constexpr = False
                  ) -> tuple[tl.tensor, tl.tensor, tl.tensor, tl.tensor]:
    """One source's PARTIAL strip at each slot, loaded and not hashed: its two words, whether it was read and
    whether it lies past the tensor (:func:`fold_one`'s geometry). ``VOLATILE``: loads the compiler keeps where
    they are written (not sunk into the branch that uses them)."""
    words = src.to(tl.pointer_type(tl.int64))
    row = slot // page_size
    col = slot - row * page_size
    live = mask & (row < rows)
    base = row * row_words + col * token_words
    lo = tl.load(words + base, mask=live, other=0, volatile=VOLATILE)
    hi = tl.load(words + base + 1, mask=live, other=0, volatile=VOLATILE)
    return lo, hi, live, mask & (row >= rows)


@device_fn
def partial_hash(lo: tl.tensor, hi: tl.tensor, live: tl.tensor) -> tl.tensor:
    """:func:`fold_one`'s PARTIAL hash of a strip loaded by :func:`partial_strip` (0 where not read)."""
    h = splitmix64(as_u64(lo))  # 0 ^ lo
    h = splitmix64(h ^ as_u64(hi))
    return tl.where(live, h, 0)


@device_fn
def partial_strips(slot: tl.tensor, mask: tl.tensor,
                   s0: tl.tensor, r0: tl.tensor, w0: tl.tensor, p0: tl.tensor, t0: tl.tensor,
                   s1: tl.tensor, r1: tl.tensor, w1: tl.tensor, p1: tl.tensor, t1: tl.tensor,
                   s2: tl.tensor, r2: tl.tensor, w2: tl.tensor, p2: tl.tensor, t2: tl.tensor,
                   s3: tl.tensor, r3: tl.tensor, w3: tl.tensor, p3: tl.tensor, t3: tl.tensor,
                   NUM_SOURCES: tl.constexpr, VOLATILE: tl.constexpr = False) -> tuple[tl.tensor, ...]:
    """Every live source's PARTIAL strip at each slot, loaded (all loads issued before anything waits on
    one) and not hashed: ``(lo, hi, read, past the tensor)`` per source, four sources (zeros past the live
    ones); :func:`partial_fold` hashes them. Apart, a kernel can do other work while the loads are in flight.
    ``VOLATILE``: see :func:`partial_strip`."""
    zero = slot * 0
    no = zero != 0
    lo0, hi0, live0, o0 = zero, zero, no, no
    lo1, hi1, live1, o1 = zero, zero, no, no
    lo2, hi2, live2, o2 = zero, zero, no, no
    lo3, hi3, live3, o3 = zero, zero, no, no
    if NUM_SOURCES > 0:
        lo0, hi0, live0, o0 = partial_strip(s0, r0, w0, p0, t0, slot, mask, VOLATILE)
    if NUM_SOURCES > 1:
        lo1, hi1, live1, o1 = partial_strip(s1, r1, w1, p1, t1, slot, mask, VOLATILE)
    if NUM_SOURCES > 2:
        lo2, hi2, live2, o2 = partial_strip(s2, r2, w2, p2, t2, slot, mask, VOLATILE)
    if NUM_SOURCES > 3:
        lo3, hi3, live3, o3 = partial_strip(s3, r3, w3, p3, t3, slot, mask, VOLATILE)
    return lo0, hi0, live0, o0, lo1, hi1, live1, o1, lo2, hi2, live2, o2, lo3, hi3, live3, o3


@device_fn
def partial_fold(lo0: tl.tensor, hi0: tl.tensor, live0: tl.tensor, o0: tl.tensor,
                 lo1: tl.tensor, hi1: tl.tensor, live1: tl.tensor, o1: tl.tensor,
                 lo2: tl.tensor, hi2: tl.tensor, live2: tl.tensor, o2: tl.tensor,
                 lo3: tl.tensor, hi3: tl.tensor, live3: tl.tensor, o3: tl.tensor,
                 NUM_SOURCES: tl.constexpr) -> tuple[tl.tensor, tl.tensor]:
    """:func:`fold_sources` (PARTIAL) of the strips :func:`partial_strips` loaded: the real_kv_hash (uint64) and
    whether any strip lay past its source."""
    acc = lo0.to(tl.uint64) * 0
    oob = o0
    if NUM_SOURCES > 0:
        acc = splitmix64(acc ^ partial_hash(lo0, hi0, live0))
    if NUM_SOURCES > 1:
        acc = splitmix64(acc ^ partial_hash(lo1, hi1, live1))
        oob = oob | o1
    if NUM_SOURCES > 2:
        acc = splitmix64(acc ^ partial_hash(lo2, hi2, live2))
        oob = oob | o2
    if NUM_SOURCES > 3:
        acc = splitmix64(acc ^ partial_hash(lo3, hi3, live3))
        oob = oob | o3
    return acc, oob

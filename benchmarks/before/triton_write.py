"""The Triton write as it was before issue 36 (main at c9a4f9e), for ``benchmarks/bench_i36k.py`` only.

A copy of ``backends/kvcanary_backends/triton/write.py`` of that commit with its registration removed: every
write folded with the 256-token tile, and the seed record and first tiles were loaded inside the branches
on the first round's values. The benchmark times it beside the current kernel in the same run; nothing else
imports it.
"""

from __future__ import annotations

from collections.abc import Hashable

import torch
import triton.language as tl

from kvcanary.context import VerifyOrWriteContext
from kvcanary.extensions import write_owner_on, write_slot_on
from kvcanary.ops.write import WriteLaunch
from kvcanary_backends.triton._hash import (
    ANCHOR_HASH_I64,
    INVALID,
    OOB_BIT,
    WOWN_BIT,
    WPOS_BIT,
    WSLOT_BIT,
    WTOK_BIT,
    as_i64,
    as_u64,
    mix3,
    record_link,
)
from kvcanary_backends.triton._jit import TUNING, Launcher, ObjectCache, cdiv, device_fn, fits32, kernel
from kvcanary_backends.triton._plan_common import read_slot
from kvcanary_backends.triton._records import ContextArgs, append_rows, context_args, fold_sources, sources_oob


@device_fn
def _load_tile(out_cache_loc: tl.tensor, input_ids: tl.tensor, positions: tl.tensor, expected_tokens: tl.tensor,
               expected_positions: tl.tensor, idx: tl.tensor, end: tl.tensor, ASSERT: tl.constexpr,
               ) -> tuple[tl.tensor, tl.tensor, tl.tensor, tl.tensor, tl.tensor]:
    """One tile of the request's tokens at ``idx`` (``idx >= end`` masked): slot, token, position and the
    oracle's token and position (the actual ones when the input assert is off)."""
    m = idx < end
    loc = tl.load(out_cache_loc + idx, mask=m, other=-1)
    tok = tl.load(input_ids + idx, mask=m, other=0)
    pos = tl.load(positions + idx, mask=m, other=0)
    if ASSERT:
        etok = tl.load(expected_tokens + idx, mask=m, other=0)
        epos = tl.load(expected_positions + idx, mask=m, other=0)
    else:
        etok = tok
        epos = pos
    return loc, tok, pos, etok, epos


@kernel()
def _write_kernel(
    buf: tl.tensor, stride_words: tl.tensor, num_slots: tl.tensor,
    ring: tl.tensor, ring_cap: tl.tensor, write_index: tl.tensor,
    slot_counter: tl.tensor, kernel_counter: tl.tensor, chain_assert: tl.tensor, kind: tl.tensor,
    offsets: tl.tensor, seeds: tl.tensor, num_valid_reqs: tl.tensor, capacity: tl.tensor,
    input_ids: tl.tensor, positions: tl.tensor, out_cache_loc: tl.tensor,
    expected_tokens: tl.tensor, expected_positions: tl.tensor, num_tokens: tl.tensor,
    rpi: tl.tensor, rpi_len: tl.tensor, r2t: tl.tensor, r2t_rows: tl.tensor, r2t_cols: tl.tensor,
    lut: tl.tensor, lut_len: tl.tensor, owner: tl.tensor,
    s0: tl.tensor, r0: tl.tensor, w0: tl.tensor, p0: tl.tensor, t0: tl.tensor, n0: tl.tensor,
    s1: tl.tensor, r1: tl.tensor, w1: tl.tensor, p1: tl.tensor, t1: tl.tensor, n1: tl.tensor,
    s2: tl.tensor, r2: tl.tensor, w2: tl.tensor, p2: tl.tensor, t2: tl.tensor, n2: tl.tensor,
    s3: tl.tensor, r3: tl.tensor, w3: tl.tensor, p3: tl.tensor, t3: tl.tensor, n3: tl.tensor,
    ASSERT: tl.constexpr, NUM_SOURCES: tl.constexpr, PARTIAL: tl.constexpr,
    TILE: tl.constexpr, FOLD_TILE: tl.constexpr, SLOT_CHECK: tl.constexpr, SLOT_LUT: tl.constexpr,
    OWNER_CHECK: tl.constexpr, WRITER_ROWS: tl.constexpr,
) -> None:
    r = tl.program_id(0).to(tl.int64)
    f = tl.program_id(1)
    nf = tl.num_programs(1)
    rec = buf.to(tl.pointer_type(tl.int64))
    if (r == 0) & (f == 0):
        tl.atomic_add(kernel_counter, 1)
    # Everything a row needs is loaded up front, before any branch (masked to the tensors: the offsets hold
    # capacity + 1 entries), so that the dependent loads start one round trip earlier.
    row_in = r < capacity  # False only for the one program of a capacity-0 plan
    nreq = tl.minimum(tl.maximum(tl.load(num_valid_reqs).to(tl.int64), 0), capacity)
    total = tl.load(offsets + nreq)
    start = tl.minimum(tl.maximum(tl.load(offsets + r, mask=row_in, other=0), 0), num_tokens)
    end = tl.minimum(tl.maximum(tl.load(offsets + r + 1, mask=row_in, other=0), 0), num_tokens)
    seed = tl.load(seeds + r, mask=row_in, other=-1)
    go = (r < nreq) & (total > 0) & (end > start)

    if go & (f == 0):
        # ---- the chain ------------------------------------------------------------------------------------
        seed_oob = (seed == INVALID) | (seed >= num_slots)
        seed_ok = (seed >= 0) & ~seed_oob
        sbase = tl.where(seed_ok, seed, 0) * stride_words
        s_tok = tl.load(rec + sbase, mask=seed_ok, other=0)
        s_pos = tl.load(rec + sbase + 1, mask=seed_ok, other=0)
        s_chain = tl.load(rec + sbase + 2, mask=seed_ok, other=0)
        running = as_u64(tl.where(seed_ok, record_link(s_chain, s_tok, s_pos), ANCHOR_HASH_I64))
        pos_assert = seed_ok & (tl.load(chain_assert) != 0)
        rp = r * 0  # the request's req_to_token row (extension checks only; past req_pool_indices: padding)
        if WRITER_ROWS:
            rp = tl.load(rpi + r, mask=r < rpi_len, other=0)
        prev_pos = s_pos
        append_rows(ring, write_index, ring_cap, seed_oob, kind, seed, -1, -1, -1, 0, r, OOB_BIT)

        lanes = tl.arange(0, TILE)
        written = tl.zeros((TILE,), tl.int64)
        loc, tok, pos, etok, epos = _load_tile(out_cache_loc, input_ids, positions, expected_tokens,
                                               expected_positions, start + lanes, end, ASSERT)
        for t in range(start, end, TILE):
            # prefetch the next tile (consumed next iteration; its lines are in L1 by then)
            n_loc, n_tok, n_pos, n_etok, n_epos = _load_tile(out_cache_loc, input_ids, positions, expected_tokens,
                                                             expected_positions, t + TILE + lanes, end, ASSERT)
            count = tl.minimum(end - t, TILE)
            # serial part: only `running` and `prev_pos` are loop-carried dependencies; the operands of
            # step j + 1 are loaded during step j.
            hs = tl.zeros((TILE,), tl.int64)
            pps = tl.zeros((TILE,), tl.int64)
            c_tok = tl.load(input_ids + t)
            c_pos = tl.load(positions + t)
            c_loc = tl.load(out_cache_loc + t)
            for j in range(0, count):
                nxt = t + tl.minimum(j + 1, count - 1)
                x_tok = tl.load(input_ids + nxt)
                x_pos = tl.load(positions + nxt)
                x_loc = tl.load(out_cache_loc + nxt)
                hs = tl.where(lanes == j, as_i64(running), hs)
                pps = tl.where(lanes == j, prev_pos, pps)
                adv = c_loc >= 0
                running = tl.where(adv, mix3(running, as_u64(c_tok), as_u64(c_pos)), running)
                prev_pos = tl.where(adv, c_pos, prev_pos)
                c_tok = x_tok
                c_pos = x_pos
                c_loc = x_loc
            # vectorized epilogue for this tile
            tm = lanes < count
            adv_v = tm & (loc >= 0)
            loc_oob = adv_v & (loc >= num_slots)
            store = adv_v & ~loc_oob
            lbase = tl.where(store, loc, 0) * stride_words
            tl.store(rec + lbase + 2, hs, mask=store)
            if NUM_SOURCES == 0:
                tl.store(rec + lbase, tok, mask=store)
                tl.store(rec + lbase + 1, pos, mask=store)
                tl.store(rec + lbase + 3, tl.zeros((TILE,), tl.int64), mask=store)
            written += store.to(tl.int64)
            append_rows(ring, write_index, ring_cap, loc_oob, kind, loc, pos, tok, tok, hs, pos, OOB_BIT)
            if ASSERT:
                ibits = tl.where(tok != etok, WTOK_BIT, 0) | tl.where(pos != epos, WPOS_BIT, 0)
                append_rows(ring, write_index, ring_cap, store & (ibits != 0),
                            kind, loc, pos, tok, etok, hs, epos, ibits)
            cp = store & pos_assert & (pos != pps + 1)
            append_rows(ring, write_index, ring_cap, cp, kind, loc, pos, tok, tok, hs, pps + 1, WPOS_BIT)
            if NUM_SOURCES > 0:
                src_oob = sources_oob(tl.where(store, loc, 0), store, r0, p0, r1, p1, r2, p2, r3, p3, NUM_SOURCES)
                append_rows(ring, write_index, ring_cap, src_oob, kind, loc, pos, tok, tok, hs, pos, OOB_BIT)
            if SLOT_CHECK:
                want = read_slot(r2t, r2t_rows, r2t_cols, lut, lut_len, rp, pos, adv_v, SLOT_LUT)
                bad = adv_v & (rp != 0) & (loc != want)
                append_rows(ring, write_index, ring_cap, bad, kind, loc, pos, tok, tok, hs, want, WSLOT_BIT)
            if OWNER_CHECK:
                holder = tl.load(owner + tl.where(store, loc, 0), mask=store, other=0)
                wrong = store & (rp != 0) & (holder != rp)
                append_rows(ring, write_index, ring_cap, wrong, kind, loc, pos, tok, rp, hs, holder, WOWN_BIT)
            loc = n_loc
            tok = n_tok
            pos = n_pos
            etok = n_etok
            epos = n_epos
        done = tl.sum(written)
        if done > 0:
            tl.atomic_add(slot_counter, done)

    if go & (f > 0):
        # ---- real-KV folds and the chain-independent fields, split over the F - 1 fold programs --------
        flanes = tl.arange(0, FOLD_TILE)
        for t in range(start + (f - 1).to(tl.int64) * FOLD_TILE, end, (nf - 1).to(tl.int64) * FOLD_TILE):
            idx = t + flanes
            m = idx < end
            loc = tl.load(out_cache_loc + idx, mask=m, other=-1)
            tok = tl.load(input_ids + idx, mask=m, other=0)
            pos = tl.load(positions + idx, mask=m, other=0)
            store = m & (loc >= 0) & (loc < num_slots)
            rkv, _oob = fold_sources(tl.where(store, loc, 0), store,
                                     s0, r0, w0, p0, t0, n0, s1, r1, w1, p1, t1, n1,
                                     s2, r2, w2, p2, t2, n2, s3, r3, w3, p3, t3, n3,
                                     NUM_SOURCES, PARTIAL)
            lbase = tl.where(store, loc, 0) * stride_words
            tl.store(rec + lbase, tok, mask=store)
            tl.store(rec + lbase + 1, pos, mask=store)
            tl.store(rec + lbase + 3, as_i64(rkv), mask=store)


def fold_programs(num_sources: int, num_tokens: int) -> int:
    """Programs per request row (the chain plus its fold programs), from shapes only."""
    if num_sources == 0:
        return 1
    return 1 + max(1, min(TUNING["write_fold_max"], cdiv(num_tokens, TUNING["write_fold_tokens"])))


_LAUNCH = Launcher(_write_kernel)
_CONTEXTS = ObjectCache()


def _context_part(ctx: VerifyOrWriteContext) -> ContextArgs:
    return context_args(ctx, with_chain_assert=True)


_NO_SLOT_CHECK: tuple[object, ...] = (None, 0, None, 0, 0, None, 0, None)


def _slot_args(call: WriteLaunch) -> tuple[tuple[object, ...], Hashable, bool, bool]:
    """The extension checks' arguments, their part of the launch key (None: both off), whether the write-slot
    check has a LUT and whether the owner check is on. Off, the arguments are constexpr Nones and zeros that
    the kernel never reads (the request rows are passed when either check is on)."""
    slot, own = write_slot_on(call.extensions), write_owner_on(call.extensions)
    if not (slot or own):
        return _NO_SLOT_CHECK, None, False, False
    rpi = call.req_pool_indices
    assert rpi is not None
    r2t, lut = (call.req_to_token, call.full_to_swa_index_mapping) if slot else (None, None)
    owner = call.slot_owner if own else None
    assert r2t is not None or not slot
    assert owner is not None or not own
    rows, cols = (0, 0) if r2t is None else r2t.shape
    lut_len = 0 if lut is None else lut.shape[0]
    key = (rpi.dtype, None if r2t is None else r2t.dtype, None if lut is None else lut.dtype,
           None if owner is None else owner.dtype, fits32(rpi.shape[0], rows, cols, lut_len))
    return (rpi, rpi.shape[0], r2t, rows, cols, lut, lut_len, owner), key, lut is not None, own


def write(call: WriteLaunch) -> None:
    """Launch the write kernel (capture-safe: grid from capacities and shapes, no host sync or allocation).

    The context's arguments (and their part of the launch key) are derived once per context object.
    """
    c: ContextArgs = _CONTEXTS.get(call.context, _context_part)
    offsets, seeds, nvr = call.plan.write_offsets, call.plan.write_seed_slot_indices, call.plan.write_num_valid_reqs
    capacity = seeds.shape[0]
    num_tokens = call.input_ids.shape[0]
    etok: torch.Tensor | None
    epos: torch.Tensor | None
    key: tuple[Hashable, ...]
    if call.enable_write_input_assert:
        etok = call.input_ids if call.expected_input_tokens is None else call.expected_input_tokens
        epos = call.positions if call.expected_input_positions is None else call.expected_input_positions
        key = (c.key, offsets.dtype, seeds.dtype, nvr.dtype, call.input_ids.dtype, call.positions.dtype,
               call.out_cache_loc.dtype, etok.dtype, epos.dtype, fits32(capacity, num_tokens))
    else:
        etok = epos = None  # not read (ASSERT is off): a constexpr None, no argument to pass
        key = (c.key, offsets.dtype, seeds.dtype, nvr.dtype, call.input_ids.dtype, call.positions.dtype,
               call.out_cache_loc.dtype, None, fits32(capacity, num_tokens))
    slot_args, slot_key, slot_lut, owner_check = _slot_args(call)
    grid = (capacity if capacity > 0 else 1, fold_programs(c.num_sources, num_tokens))
    _LAUNCH(
        grid,
        (*key, slot_key),
        (*c.head, offsets, seeds, nvr, capacity, call.input_ids, call.positions, call.out_cache_loc, etok, epos,
         num_tokens, *slot_args, *c.sources),
        (bool(call.enable_write_input_assert), c.num_sources, c.partial, TUNING["write_tile"],
         TUNING["write_fold_tile"], write_slot_on(call.extensions), slot_lut, owner_check, slot_key is not None),
        TUNING["write_warps"],
    )

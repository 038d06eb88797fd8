"""write: stamp one record per written token, chaining each request from its seed (torch_ref's rules).

Grid ``(write_req_capacity, F)``. Program ``(r, 0)`` owns request row ``r``'s hash chain, the only serial
part of the operation; programs ``(r, 1..F-1)`` fold the real-KV bytes of that request's tokens in parallel
and store the fields that do not depend on the chain. ``F`` comes from ``num_tokens`` (a shape), is 1 when
there is nothing to fold, and is never a compile-time constant, so batch sizes never recompile.

Chain program, per tile of ``TILE`` tokens (one token per lane of one warp):

- the next tile's token, position and slot vectors are loaded before this tile's serial loop starts, so
  the scalar reads the loop makes hit L1, and each step's operands are loaded one step ahead;
- the serial loop carries only the running hash and the previous position; it drops the hash before each
  token into its lane of a tile vector;
- afterwards, vectorized: the prev_hash stores (all four fields when there are no sources), the
  violation checks and the ring rows.

Fold programs store token, position and real_kv_hash; the chain program stores prev_hash. The two never
write the same field.

A decode-shaped write with sources (no more tokens than request rows, a fact of shapes) launches no fold
programs (``CHAIN_FOLD``, grid ``(capacity, 1)``): the chain program folds each tile's strips itself, issuing
their loads at the top of the tile, before its serial loop (their address is the slot vector the program
already holds, so no dependent round is added), and stores all four fields. ``TUNING["write_chain_fold"] = 0``
keeps the two-program layout for those writes (a benchmark times both).

``TUNING["write_variant"]`` (bits; 0: the kernel before them; 3 the default), each sparing the decode path latency:
bit 1, relaxed atomics (``SEM``): the counters and the ring claims need no order within a launch, and an
"acq_rel" atomic compiles to a fence (``MEMBAR.ALL.GPU``) that waits for every earlier store, the slot
counter's after the records' stores: one more round trip at the end of every program. Bit 2, the lean
decode chain (``LEAN``): every load that depends on nothing (``chain_position_assert``, the request's row) is
volatile, so it stays in the first round instead of being sunk past the first branch (the position check
waited for it in a third round), and a tile of one token runs no serial step (its record stores the running
hash, in hand; the mix3 of its own token would only feed a later tile, and there is none). Bit 4, the
guessed slot (``GUESS``, a PARTIAL chain fold only): request ``r``'s token is at index ``r`` when every
request holds one (a decode step), so its slot is loaded in the first round beside the offsets, and its
strips in the second beside the seed record; a request whose offsets say it is that one token uses them,
any other loads its strips from its tile's slots as before (one round more).

As torch_ref documents, what a launch leaves in a slot written twice, or in a seed slot the same launch
writes, is unspecified.

Request rows ``r < clamp(num_valid_reqs, 0, capacity)`` only, nothing at all when
``write_offsets[that] <= 0``; token ranges are clipped to the token arrays. Rows, per token: a slot past
the buffer (INDEX_OUT_OF_RANGE, no store, the chain advances); the input assert; the chain-position assert
(seed in range and the flag set); a real-KV strip outside its source. A seed of INVALID_SLOT or past the
buffer gives one INDEX_OUT_OF_RANGE row (``expected_aux`` = the request row) and starts from the anchor.
With the extensions, per token: WRITE_SLOT_MISMATCH (``SLOT_CHECK``), then WRITE_SLOT_OWNER_MISMATCH
(``OWNER_CHECK``: the holder ``slot_owner[loc]`` of a stored token against the writer's request row);
``WRITER_ROWS`` (either check on) loads the request's row of ``req_pool_indices``.
"""

from __future__ import annotations

from collections.abc import Hashable

import torch
import triton.language as tl

from kvcanary.context import VerifyOrWriteContext
from kvcanary.extensions import write_owner_on, write_slot_on
from kvcanary.ops.write import WRITE, WriteLaunch
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
from kvcanary_backends.triton._jit import (
    TUNING,
    LaunchArgs,
    Launcher,
    ObjectCache,
    PreparedLaunch,
    cdiv,
    device_fn,
    fits32,
    kernel,
)
from kvcanary_backends.triton._plan_common import read_slot
from kvcanary_backends.triton._records import (
    ContextArgs,
    append_rows,
    context_args,
    fold_sources,
    partial_fold,
    partial_strips,
    sources_oob,
)


@device_fn
def _load_tile(out_cache_loc: tl.tensor, input_ids: tl.tensor, positions: tl.tensor, expected_tokens: tl.tensor,
               expected_positions: tl.tensor, idx: tl.tensor, end: tl.tensor, ASSERT: tl.constexpr,
               VOLATILE: tl.constexpr) -> tuple[tl.tensor, tl.tensor, tl.tensor, tl.tensor, tl.tensor]:
    """One tile of the request's tokens at ``idx`` (``idx >= end`` masked): slot, token, position and the
    oracle's token and position (the actual ones when the input assert is off). ``VOLATILE``: loads the
    compiler keeps where they are written (issued before a branch that alone uses them)."""
    m = idx < end
    loc = tl.load(out_cache_loc + idx, mask=m, other=-1, volatile=VOLATILE)
    tok = tl.load(input_ids + idx, mask=m, other=0, volatile=VOLATILE)
    pos = tl.load(positions + idx, mask=m, other=0, volatile=VOLATILE)
    if ASSERT:
        etok = tl.load(expected_tokens + idx, mask=m, other=0, volatile=VOLATILE)
        epos = tl.load(expected_positions + idx, mask=m, other=0, volatile=VOLATILE)
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
    OWNER_CHECK: tl.constexpr, WRITER_ROWS: tl.constexpr, EARLY_FOLD: tl.constexpr, CHAIN_FOLD: tl.constexpr,
    SEM: tl.constexpr, LEAN: tl.constexpr, GUESS: tl.constexpr,
) -> None:
    r = tl.program_id(0).to(tl.int64)
    f = tl.program_id(1)
    nf = tl.num_programs(1)
    rec = buf.to(tl.pointer_type(tl.int64))
    if (r == 0) & (f == 0):
        tl.atomic_add(kernel_counter, 1, sem=SEM)
    # Everything a row needs is loaded up front, before any branch (masked to the tensors: the offsets hold
    # capacity + 1 entries), so that the dependent loads start one round trip earlier.
    row_in = r < capacity  # False only for the one program of a capacity-0 plan
    # LEAN: volatile, so that they stay in the first round (else sunk past `go`: a third round)
    cpa = tl.load(chain_assert, volatile=LEAN)
    rp = r * 0  # the request's req_to_token row (extension checks only; past req_pool_indices: padding)
    if WRITER_ROWS:
        rp = tl.load(rpi + r, mask=r < rpi_len, other=0, volatile=LEAN)
    lanes = tl.arange(0, TILE)
    if GUESS:  # request r's token is at index r when every request holds one: its slot, in the first round
        g_lane = ((lanes == 0) & (r < num_tokens)) != 0  # `!= 0`: the interpreter's masks (see read_slot)
        g_loc = tl.load(out_cache_loc + r + lanes, mask=g_lane, other=-1, volatile=True)
    # LEAN: the whole first round volatile, hence issued in this order, before anything waits on one of them
    # (ptxas issued a volatile load after the first use of a plain one, a round late)
    nvr = tl.load(num_valid_reqs, volatile=LEAN)
    o_start = tl.load(offsets + r, mask=row_in, other=0, volatile=LEAN)
    o_end = tl.load(offsets + r + 1, mask=row_in, other=0, volatile=LEAN)
    seed = tl.load(seeds + r, mask=row_in, other=-1, volatile=LEAN)
    nreq = tl.minimum(tl.maximum(nvr.to(tl.int64), 0), capacity)
    start = tl.minimum(tl.maximum(o_start, 0), num_tokens)
    end = tl.minimum(tl.maximum(o_end, 0), num_tokens)
    if GUESS:
        # the second round starts with the guessed slot's strips, where the offsets say it is this request's
        # only token (the tile's lane 0): the fold then takes no round after the tile's slots (issued first:
        # code that waits for a later load of this round was scheduled ahead of their division otherwise)
        one = (start == r) & (end - start == 1)
        g_ok = (g_lane & one & (g_loc >= 0) & (g_loc < num_slots)) != 0
        (glo0, ghi0, glive0, go0, glo1, ghi1, glive1, go1,
         glo2, ghi2, glive2, go2, glo3, ghi3, glive3, go3) = partial_strips(
            tl.where(g_ok, g_loc, 0), g_ok, s0, r0, w0, p0, t0, s1, r1, w1, p1, t1,
            s2, r2, w2, p2, t2, s3, r3, w3, p3, t3, NUM_SOURCES, True)
    total = tl.load(offsets + nreq, volatile=LEAN)
    go = (r < nreq) & (total > 0) & (end > start)
    # The chain's second round, also before any branch (volatile: the compiler would sink each load into the
    # branch that uses it, after `go`, one more round trip): the seed record and the first tile's tokens.
    chain = (f == 0) & (end > start)
    seed_oob = (seed == INVALID) | (seed >= num_slots)
    seed_ok = (seed >= 0) & ~seed_oob
    sbase = tl.where(seed_ok, seed, 0) * stride_words
    s_tok = tl.load(rec + sbase, mask=seed_ok & chain, other=0, volatile=True)
    s_pos = tl.load(rec + sbase + 1, mask=seed_ok & chain, other=0, volatile=True)
    s_chain = tl.load(rec + sbase + 2, mask=seed_ok & chain, other=0, volatile=True)
    h_loc, h_tok, h_pos, h_etok, h_epos = _load_tile(out_cache_loc, input_ids, positions, expected_tokens,
                                                     expected_positions, start + lanes, tl.where(chain, end, start),
                                                     ASSERT, True)
    first = tl.where(chain, start, 0)  # the first token's operands of the serial loop (any token when unused)
    f_tok = tl.load(input_ids + first, mask=chain, other=0, volatile=True)
    f_pos = tl.load(positions + first, mask=chain, other=0, volatile=True)
    f_loc = tl.load(out_cache_loc + first, mask=chain, other=0, volatile=True)
    # a fold program's first slots likewise, when its tile is the narrow one (EARLY_FOLD: a decode-shaped
    # write's; a wide tile's slots would hold registers at the branch in every program)
    flanes = tl.arange(0, FOLD_TILE)
    fidx = start + tl.maximum(f - 1, 0).to(tl.int64) * FOLD_TILE + flanes
    fold0 = ((f > 0) & (fidx < end)) != 0  # `!= 0`: the interpreter's masks (see _plan_common.read_slot)
    if EARLY_FOLD:
        g_loc = tl.load(out_cache_loc + fidx, mask=fold0, other=-1, volatile=True)

    if go & (f == 0):
        # ---- the chain ------------------------------------------------------------------------------------
        running = as_u64(tl.where(seed_ok, record_link(s_chain, s_tok, s_pos), ANCHOR_HASH_I64))
        pos_assert = seed_ok & (cpa != 0)
        prev_pos = s_pos
        append_rows(ring, write_index, ring_cap, seed_oob, kind, seed, -1, -1, -1, 0, r, OOB_BIT, SEM)

        written = tl.zeros((TILE,), tl.int64)
        loc = h_loc
        tok = h_tok
        pos = h_pos
        etok = h_etok
        epos = h_epos
        for t in range(start, end, TILE):
            if CHAIN_FOLD:
                # this tile's real-KV strips first: their loads need only `loc` (in hand)
                fstore = (lanes < tl.minimum(end - t, TILE)) & (loc >= 0) & (loc < num_slots)
                if GUESS:  # (PARTIAL) a one-token request's strips are in hand (loaded with the seed record)
                    if one:
                        (lo0, hi0, live0, o0, lo1, hi1, live1, o1,
                         lo2, hi2, live2, o2, lo3, hi3, live3, o3) = (glo0, ghi0, glive0, go0, glo1, ghi1, glive1, go1,
                                                                      glo2, ghi2, glive2, go2, glo3, ghi3, glive3, go3)
                    else:
                        (lo0, hi0, live0, o0, lo1, hi1, live1, o1,
                         lo2, hi2, live2, o2, lo3, hi3, live3, o3) = partial_strips(
                            tl.where(fstore, loc, 0), fstore, s0, r0, w0, p0, t0, s1, r1, w1, p1, t1,
                            s2, r2, w2, p2, t2, s3, r3, w3, p3, t3, NUM_SOURCES)
                elif PARTIAL:  # every source's strip loaded now, hashed after the serial loop (which needs
                    # none of them): one round for all the strips, spent on the chain
                    (lo0, hi0, live0, o0, lo1, hi1, live1, o1,
                     lo2, hi2, live2, o2, lo3, hi3, live3, o3) = partial_strips(
                        tl.where(fstore, loc, 0), fstore, s0, r0, w0, p0, t0, s1, r1, w1, p1, t1,
                        s2, r2, w2, p2, t2, s3, r3, w3, p3, t3, NUM_SOURCES)
                else:
                    rkv, f_oob = fold_sources(tl.where(fstore, loc, 0), fstore,
                                              s0, r0, w0, p0, t0, n0, s1, r1, w1, p1, t1, n1,
                                              s2, r2, w2, p2, t2, n2, s3, r3, w3, p3, t3, n3,
                                              NUM_SOURCES, PARTIAL)
            # prefetch the next tile (consumed next iteration; its lines are in L1 by then)
            n_loc, n_tok, n_pos, n_etok, n_epos = _load_tile(out_cache_loc, input_ids, positions, expected_tokens,
                                                             expected_positions, t + TILE + lanes, end, ASSERT,
                                                             False)
            nt = tl.minimum(t + TILE, end - 1)  # the next tile's first token (any token after the last tile)
            x0_tok = tl.load(input_ids + nt)
            x0_pos = tl.load(positions + nt)
            x0_loc = tl.load(out_cache_loc + nt)
            count = tl.minimum(end - t, TILE)
            # serial part: only `running` and `prev_pos` are loop-carried dependencies; the operands of
            # step j + 1 are loaded during step j (those of a tile's first step during the tile before).
            hs = tl.zeros((TILE,), tl.int64)
            pps = tl.zeros((TILE,), tl.int64)
            if (LEAN and TILE > 1) and (count == 1):
                # a tile of one token is the request's last (a decode step; not so with TILE 1): its record
                # stores the hash and position before it, in hand; its own link is never needed, so no step runs
                # before the stores
                hs += as_i64(running)
                pps += prev_pos
            else:
                c_tok = f_tok
                c_pos = f_pos
                c_loc = f_loc
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
            elif CHAIN_FOLD:
                if PARTIAL:
                    rkv, f_oob = partial_fold(lo0, hi0, live0, o0, lo1, hi1, live1, o1,
                                              lo2, hi2, live2, o2, lo3, hi3, live3, o3, NUM_SOURCES)
                tl.store(rec + lbase, tok, mask=store)
                tl.store(rec + lbase + 1, pos, mask=store)
                tl.store(rec + lbase + 3, as_i64(rkv), mask=store)
            written += store.to(tl.int64)
            append_rows(ring, write_index, ring_cap, loc_oob, kind, loc, pos, tok, tok, hs, pos, OOB_BIT, SEM)
            if ASSERT:
                ibits = tl.where(tok != etok, WTOK_BIT, 0) | tl.where(pos != epos, WPOS_BIT, 0)
                append_rows(ring, write_index, ring_cap, store & (ibits != 0),
                            kind, loc, pos, tok, etok, hs, epos, ibits, SEM)
            cp = store & pos_assert & (pos != pps + 1)
            append_rows(ring, write_index, ring_cap, cp, kind, loc, pos, tok, tok, hs, pps + 1, WPOS_BIT, SEM)
            if NUM_SOURCES > 0:
                if CHAIN_FOLD:
                    src_oob = f_oob  # the fold's own flags: the same geometry test on the same lanes
                else:
                    src_oob = sources_oob(tl.where(store, loc, 0), store, r0, p0, r1, p1, r2, p2, r3, p3,
                                          NUM_SOURCES)
                append_rows(ring, write_index, ring_cap, src_oob, kind, loc, pos, tok, tok, hs, pos, OOB_BIT, SEM)
            if SLOT_CHECK:
                want = read_slot(r2t, r2t_rows, r2t_cols, lut, lut_len, rp, pos, adv_v, SLOT_LUT)
                bad = adv_v & (rp != 0) & (loc != want)
                append_rows(ring, write_index, ring_cap, bad, kind, loc, pos, tok, tok, hs, want, WSLOT_BIT, SEM)
            if OWNER_CHECK:
                holder = tl.load(owner + tl.where(store, loc, 0), mask=store, other=0)
                wrong = store & (rp != 0) & (holder != rp)
                append_rows(ring, write_index, ring_cap, wrong, kind, loc, pos, tok, rp, hs, holder, WOWN_BIT, SEM)
            loc = n_loc
            tok = n_tok
            pos = n_pos
            etok = n_etok
            epos = n_epos
            f_tok = x0_tok
            f_pos = x0_pos
            f_loc = x0_loc
        done = tl.sum(written)
        if done > 0:
            tl.atomic_add(slot_counter, done, sem=SEM)

    if (not CHAIN_FOLD) and (go & (f > 0)):  # (a chain-fold launch has no fold programs)
        # ---- real-KV folds and the chain-independent fields, split over the F - 1 fold programs --------
        first_fold = start + (f - 1).to(tl.int64) * FOLD_TILE
        for t in range(first_fold, end, (nf - 1).to(tl.int64) * FOLD_TILE):
            idx = t + flanes
            m = idx < end
            if EARLY_FOLD:
                loc = tl.where(t == first_fold, g_loc, tl.load(out_cache_loc + idx, mask=(m & (t != first_fold)) != 0,
                                                               other=-1))
            else:
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


def chain_folds(num_sources: int, num_tokens: int, capacity: int, *, partial: bool = True) -> bool:
    """Whether the chain program folds its own tokens' strips (no fold programs, grid ``(capacity, 1)``), from
    shapes only: a decode-shaped write with sources (no more tokens than request rows) hashing PARTIAL strips,
    unless ``TUNING["write_chain_fold"]`` is 0 (the two-program layout, kept so that a benchmark times both).
    A real-KV ALL fold reads every byte of its tokens, which the fold programs overlap with the chain: it folds
    in the chain program only with ``TUNING["write_chain_fold_all"]``."""
    return (num_sources > 0 and num_tokens <= capacity and TUNING["write_chain_fold"] != 0
            and (partial or TUNING["write_chain_fold_all"] != 0))


def fold_tile(num_sources: int, num_tokens: int, capacity: int) -> int:
    """Tokens per fold iteration, from shapes only. A decode-shaped write (no more tokens than request rows)
    folds about one token a request: a narrow tile holds fewer registers, so more of its ``bs x 2`` programs
    are resident at once, and hashes no masked lanes (with the chain fold, see :func:`chain_folds`, no fold
    program uses it). Without sources nothing is folded: one variant."""
    if num_sources and num_tokens <= capacity:
        return TUNING["write_fold_tile_decode"]
    return TUNING["write_fold_tile"]


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


def _launch_args(call: WriteLaunch) -> LaunchArgs:
    """(grid, variant key, arguments, constexprs, warps) of the launch of ``call``; the context's arguments (and
    their part of the key) are derived once per context object."""
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
    tile = fold_tile(c.num_sources, num_tokens, capacity)
    chain_fold = chain_folds(c.num_sources, num_tokens, capacity, partial=bool(c.partial))
    grid = (capacity if capacity > 0 else 1, 1 if chain_fold else fold_programs(c.num_sources, num_tokens))
    return (
        grid,
        (*key, slot_key),
        (*c.head, offsets, seeds, nvr, capacity, call.input_ids, call.positions, call.out_cache_loc, etok, epos,
         num_tokens, *slot_args, *c.sources),
        (bool(call.enable_write_input_assert), c.num_sources, c.partial, TUNING["write_tile"],
         tile, write_slot_on(call.extensions), slot_lut, owner_check, slot_key is not None,
         tile < TUNING["write_fold_tile"] and not chain_fold, chain_fold,
         "relaxed" if TUNING["write_variant"] & 1 else "acq_rel", bool(TUNING["write_variant"] & 2),
         chain_fold and bool(c.partial) and bool(TUNING["write_variant"] & 4)),
        TUNING["write_warps"],
    )


def prepare(call: WriteLaunch) -> PreparedLaunch | None:
    """The launch of ``call`` with its arguments bound (:meth:`Launcher.prepare`)."""
    return _LAUNCH.prepare(*_launch_args(call))


@WRITE.kernel("triton", notes="one serial chain per request; real-KV folds in parallel programs "
              "(a decode PARTIAL write: in the chain)", prepare=prepare)
def write(call: WriteLaunch) -> None:
    """Launch the write kernel (capture-safe: grid from capacities and shapes, no host sync or allocation)."""
    _LAUNCH(*_launch_args(call))

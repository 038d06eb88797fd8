// plan_common.cuh: the plan's two stages as block-level device functions, shared by plan.cu (both stages
// fused in one launch), plan_offsets.cu and plan_entries.cu. Semantics: backends/torch_ref/_plan_common.py.
//
// Slot reads follow torch_ref's one rule: req_to_token[rp, pos] outside the tensor reads INVALID_SLOT; a value
// below 0 passes the full->SWA translation unchanged; a value at or past the LUT's length becomes INVALID_SLOT.
// Nothing wraps around: the window start is taken only where it is positive, and offsets and totals are exact
// prefix sums saturated at INT64_MAX (sat_add), so a total that would wrap overflows the plan instead.
#pragma once
#include "kvcanary_common.cuh"

namespace kvc {

struct PlanInputs {
  const i64* req_pool_indices;
  const i64* prefix_lens;
  const i64* extend_seq_lens;
  const int* req_to_token;
  i64 rtt_rows;
  i64 rtt_cols;
  const i64* lut;
  i64 lut_len;
  i64 window;
  i64 bs;
};

// A req_to_token value as a slot: through the full->SWA LUT when there is one.
template <bool kHasLut>
__device__ __forceinline__ i64 translate(const PlanInputs& in, i64 raw) {
  if (!kHasLut || raw < 0) return raw;
  return raw < in.lut_len ? in.lut[raw] : kInvalidSlot;
}

template <bool kHasLut>
__device__ __forceinline__ i64 read_slot(const PlanInputs& in, i64 rp, i64 pos) {
  const bool ok = rp >= 0 && rp < in.rtt_rows && pos >= 0 && pos < in.rtt_cols;
  return translate<kHasLut>(in, ok ? (i64)in.req_to_token[rp * in.rtt_cols + pos] : kInvalidSlot);
}

#ifndef KVC_MARK_ZERO
#define KVC_MARK_ZERO 0  // the ZERO_SLOT_IN_LIVE_RANGE extension (1: mark padding slots inside live ranges)
#endif

// The slot an entry stores: with KVC_MARK_ZERO, kZeroSlotMark where a non-padding row's req_to_token value is 0
// and its (translated) slot is 0 (an evicted SWA position, translated to 0 from a non-zero value, stays 0).
// Without it the slot itself, through a macro: the default kernels' code is unchanged, byte for byte.
#if KVC_MARK_ZERO
__device__ __forceinline__ i64 stored_slot(const PlanInputs& in, i64 rp, i64 pos, i64 slot) {
  if (slot == 0 && rp != 0 && rp >= 0 && rp < in.rtt_rows && pos >= 0 && pos < in.rtt_cols &&
      in.req_to_token[rp * in.rtt_cols + pos] == 0) {
    return kZeroSlotMark;
  }
  return slot;
}
#define KVC_STORED_SLOT(in, rp, pos, slot) stored_slot(in, rp, pos, slot)
#else
#define KVC_STORED_SLOT(in, rp, pos, slot) (slot)
#endif

__device__ __forceinline__ i64 window_start(i64 prefix, i64 window) {
  // exact where taken (prefix > window >= 0); wsub, not `prefix - window`: with signed arithmetic the compiler
  // may assume no overflow and fold the test into max(prefix - window, 0), which wraps for prefix near INT64_MIN
  return window > 0 && prefix > window ? wsub(prefix, window) : 0;
}

// The rows [lo, hi) thread threadIdx.x owns in a block scan of n values: contiguous runs of cdiv(n, kThreads).
struct Run {
  i64 lo;
  i64 hi;
};
template <int kThreads>
__device__ __forceinline__ Run run_of(i64 n) {
  const i64 per = (n + kThreads - 1) / kThreads;
  const i64 lo = imin((i64)threadIdx.x * per, n);
  return Run{lo, imin(lo + per, n)};
}

// Exclusive prefix sums of K value columns over the rows [0, n) at once (values in [0, INT64_MAX]; every sum
// saturated at INT64_MAX by sat_add, which is associative on such values), by a block of kThreads threads.
// Each thread takes its run (run_of): value(r, v) gives row r's K
// values (called twice per row: to sum the run, then to emit it), emit(r, off, v) receives row r's exclusive
// offsets and returns whether the row is "bad" (the caller's test). Between the two passes: warp-shuffle scans
// of the run sums and one exchange of the warp sums through warp_tmp (K * kThreads / 32 values), so the whole
// scan costs two block barriers and needs no barrier before it. totals[k] gets column k's sum before the emit
// pass (so emit may read it through a captured reference to the caller's array); the result is
// whether any emit returned true, in every thread. Whatever emit writes to shared memory is visible on return.
template <int kThreads, int K, class Value, class Emit>
__device__ bool block_scan(i64 n, u64* warp_tmp, u64 (&totals)[K], Value value, Emit emit) {
  constexpr int kWarps = kThreads / 32;
  static_assert(kThreads % 32 == 0 && kWarps <= 32, "a block of 32 to 1024 threads, whole warps");
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const Run run = run_of<kThreads>(n);
  u64 s[K], x[K], v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) s[k] = 0;
  for (i64 r = run.lo; r < run.hi; ++r) {
    value(r, v);
#pragma unroll
    for (int k = 0; k < K; ++k) s[k] = sat_add(s[k], v[k]);
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    x[k] = s[k];
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const u64 y = __shfl_up_sync(kFullMask, x[k], off);
      if (lane >= off) x[k] = sat_add(x[k], y);
    }
    if (lane == 31) warp_tmp[k * kWarps + warp] = x[k];
  }
  __syncthreads();
  u64 base[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {  // every warp scans the warp sums itself: no second exchange
    u64 w = lane < kWarps ? warp_tmp[k * kWarps + lane] : 0;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const u64 y = __shfl_up_sync(kFullMask, w, off);
      if (lane >= off) w = sat_add(w, y);
    }
    const u64 before = __shfl_sync(kFullMask, w, warp > 0 ? warp - 1 : 0);
    totals[k] = __shfl_sync(kFullMask, w, kWarps - 1);
    // the lanes before this one (their inclusive sum, from lane - 1: saturated sums cannot be subtracted)
    const u64 left = __shfl_up_sync(kFullMask, x[k], 1);
    base[k] = sat_add(warp > 0 ? before : 0, lane > 0 ? left : 0);
  }
  int bad = 0;
  for (i64 r = run.lo; r < run.hi; ++r) {
    value(r, v);
    bad |= emit(r, base, v) ? 1 : 0;
#pragma unroll
    for (int k = 0; k < K; ++k) base[k] = sat_add(base[k], v[k]);
  }
  return __syncthreads_or(bad) != 0;
}

// One batch row as both stages read it.
struct PlanRow {
  i64 rp;
  i64 prefix;
  i64 ws;   // window start
  u64 len;  // verify entries (0 for a padding row)
};

__device__ __forceinline__ PlanRow plan_row(const PlanInputs& in, i64 r) {
  const i64 rp = in.req_pool_indices[r];
  const i64 prefix = in.prefix_lens[r];
  const i64 ws = window_start(prefix, in.window);
  return PlanRow{rp, prefix, ws, rp != kReqPoolIdxPadding ? (u64)imax(wsub(prefix, ws), 0) : 0};
}

struct OffsetsOutputs {
  i64* verify_offsets_scratch;  // may be null (the fused plan without a scratch)
  i64* write_offsets;
  i64* write_seeds;
  int* verify_num_valid;
  int* verify_enable;
  int* write_num_valid_reqs;
  i64 write_offsets_len;  // entries of write_offsets zeroed past bs when zero_tail
  bool zero_tail;
};

// Stage 1 by one block: one scan of the (verify length, write length) pairs that writes the scratch, the write
// offsets and the seeds straight from its emit pass (no shared arrays), then the totals, num_valid, enable and
// num_valid_reqs from thread 0.
template <int kThreads, bool kHasLut>
__device__ void plan_offsets_block(const PlanInputs& in, u64* warp_tmp, i64 verify_capacity,
                                   const OffsetsOutputs& out) {
  u64 tot[2];
  block_scan<kThreads, 2>(
      in.bs, warp_tmp, tot,
      [&](i64 r, u64 (&v)[2]) {
        const PlanRow row = plan_row(in, r);
        v[0] = row.len;
        v[1] = row.rp != kReqPoolIdxPadding ? (u64)imax(in.extend_seq_lens[r], 0) : 0;
      },
      [&](i64 r, const u64 (&off)[2], const u64 (&v)[2]) {
        if (out.verify_offsets_scratch != nullptr) out.verify_offsets_scratch[r] = (i64)off[0];
        out.write_offsets[r] = (i64)off[1];
        const i64 rp = in.req_pool_indices[r];
        const i64 prefix = in.prefix_lens[r];
        const bool has_seed = rp != kReqPoolIdxPadding && prefix > 0 && v[1] > 0;
        out.write_seeds[r] = has_seed ? read_slot<kHasLut>(in, rp, wsub(prefix, 1)) : (i64)-1;
        return false;
      });
  if (threadIdx.x == 0) {
    const bool overflow = (i64)tot[0] > verify_capacity;
    if (out.verify_offsets_scratch != nullptr) out.verify_offsets_scratch[in.bs] = (i64)tot[0];
    *out.verify_num_valid = (int)(u32)(overflow ? (u64)verify_capacity : tot[0]);  // int32: low 32 bits
    *out.verify_enable = overflow ? 0 : 1;
    *out.write_num_valid_reqs = (int)(u32)(u64)in.bs;
    out.write_offsets[in.bs] = (i64)tot[1];
  }
  if (out.zero_tail) {
    for (i64 i = in.bs + 1 + threadIdx.x; i < out.write_offsets_len; i += kThreads) out.write_offsets[i] = 0;
  }
}

struct EntryOutputs {
  i64* slots;
  i64* tokens;
  i64* positions;
  i64* prevs;
};

struct TokenPool {
  const int* data;
  i64 rows;
  i64 cols;
  const i64* valid_lens;
  i64 offset;  // kv_token_id_vs_position_offset
};

// torch.searchsorted(offs, e, right=True) - 1, clamped to [0, bs): the very same upper-bound bisection, so even
// offsets that are not sorted (a hostile scratch) pick the reference's row. bs >= 1.
__device__ __forceinline__ i64 row_of(const u64* offs, i64 bs, i64 e) {
  i64 lo = 0;
  i64 hi = bs;
  while (lo < hi) {
    const i64 mid = lo + ((hi - lo) >> 1);
    if (!((i64)offs[mid] > e)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return iclamp(lo - 1, 0, bs - 1);
}

#ifndef KVC_PLAN_EPT
#define KVC_PLAN_EPT 4
#endif
constexpr int kEntriesPerThread = KVC_PLAN_EPT;

// The fast path's stores: streaming (st.global.cs, evict-first). The plan's entries are read by a later launch
// (the verify), not by this one, so they need not stay in L2 ahead of the req_to_token lines still to be read
// (the measurements: docs/tuning.md, "cuda backend: fused plan").
#ifndef KVC_HOST_EMULATION
#define KVC_PLAN_ST(p, v) __stcs((p), (i64)(v))
#else
#define KVC_PLAN_ST(p, v) (*(p) = (i64)(v))
#endif

// Stage 2 for the entries e0, e0 + step, ... (kEntriesPerThread of them, those below n), given the rows'
// exclusive verify offsets offs[0, bs) (bs >= 1). All loads of the batch are issued before its stores, so a
// thread keeps several req_to_token / pool reads in flight.
template <bool kHasLut, bool kHasPool>
__device__ __forceinline__ void plan_entries_batch(const PlanInputs& in, const u64* offs, const TokenPool& pool,
                                                   i64 e0, i64 step, i64 n, const EntryOutputs& out) {
  constexpr int U = kEntriesPerThread;
  i64 rp[U], pos[U], slot[U], prev[U], tok[U];
  i64 r[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const i64 e = e0 + u * step;
    r[u] = e < n ? row_of(offs, in.bs, e) : 0;
    rp[u] = in.req_pool_indices[r[u]];
    pos[u] = wadd(window_start(in.prefix_lens[r[u]], in.window), wsub(e, (i64)offs[r[u]]));
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    slot[u] = read_slot<kHasLut>(in, rp[u], pos[u]);
    prev[u] = pos[u] > 0 ? read_slot<kHasLut>(in, rp[u], pos[u] - 1) : (i64)-1;
    tok[u] = -1;
    if (kHasPool) {
      const i64 q = wadd(pos[u], pool.offset);
      if (q >= 0 && q < pool.valid_lens[r[u]] && q < pool.cols && rp[u] >= 0 && rp[u] < pool.rows) {
        tok[u] = (i64)pool.data[rp[u] * pool.cols + q];
      }
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const i64 e = e0 + u * step;
    if (e < n) {
      out.slots[e] = KVC_STORED_SLOT(in, rp[u], pos[u], slot[u]);
      out.tokens[e] = tok[u];
      out.positions[e] = pos[u];
      out.prevs[e] = prev[u];
    }
  }
}

// ---- the tile path --------------------------------------------------------------------------------------
// When the row offsets are sorted (always the plan's own, saturated sums; a hostile scratch may not be), the rows
// cover contiguous entry ranges: row 0 [0, offs[1]), row r [offs[r], offs[r+1]), the last row [offs[bs-1], n),
// each clipped to [0, n): exactly what searchsorted(offs, e, right=True) - 1, clamped, picks. Each range is cut
// into tiles of kTile = kThreads * kEntriesPerThread entries; block b takes a contiguous share of the tiles
// (tile_share), so consecutive tiles mostly lie in one row: the share's first row comes from the scan's emit
// pass (TileRows::first_row), and only a change of row costs a bisection over the rows' exclusive tile counts in
// shared memory (a bisection per tile was a visible share of the kernel's warp samples under Nsight Compute;
// wall time did not change, the tile phase being bound by its stores, but the per-tile work is smaller). Within
// a tile every entry has the same row, and warp w takes its 32 * kEntriesPerThread consecutive entries in
// kEntriesPerThread coalesced rounds of 32: each entry's predecessor slot is the neighbouring lane's (lane 0:
// lane 31's of the round before, by the same shuffle; only round 0's lane 0 reads its own).
//
// With per-entry checks the kernel was bound by instructions issued, not bytes (Nsight Compute, figures in
// docs/tuning.md: "cuda backend: fused plan"; after the fast path its tile phase is bound by L2 stores), so a warp whose entries of the tile all lie below the row's end and whose req_to_token (and pool)
// positions are all in range takes a path without per-entry checks: one base pointer per array, rounds at
// immediate offsets, 32-bit shuffles without a LUT. Other warps check each entry. Deciding per warp, not per
// tile, keeps a row that is no multiple of the tile on the fast path up to its last partial warp.
// Unsorted offsets take the per-entry bisection instead.
constexpr int kTileRowsMax = 1024;  // rows whose shared arrays (4 x 8 bytes each) the tile path keeps

// Dynamic shared memory of the tile path: offs | rp | ws | tiles, bs words each.
__host__ __device__ constexpr i64 tile_shared_words(i64 bs) { return 4 * bs; }

// The rows' shared arrays of the tile path (offs: exclusive verify offsets, tiles: exclusive tile counts), and
// the row of the block's first tile (meaningful when the block's share is not empty).
struct TileRows {
  const u64* offs;
  const i64* rp;
  const i64* ws;
  const u64* tiles;
  u64 ntiles;
  i64 first_row;
};

// The first tile of block `block`'s share when `blocks` blocks split `ntiles` tiles into contiguous runs of
// ntiles / blocks or one more (no product that could wrap).
__device__ __forceinline__ u64 tile_share(u64 ntiles, i64 block, i64 blocks) {
  const u64 q = ntiles / (u64)blocks;
  const u64 rem = ntiles % (u64)blocks;
  return q * (u64)block + ((u64)block < rem ? (u64)block : rem);
}

// For a scan's emit pass: row r, whose tiles are [first, first + count), holds tile t (one row does, for any
// t < ntiles: the tile offsets are sums of counts, never decreasing).
__device__ __forceinline__ bool row_holds_tile(u64 first, u64 count, u64 t) { return first <= t && t - first < count; }

// The last row in [lo, bs) whose first tile is <= t, given that row lo - 1's is (rows without tiles share the
// next row's first tile, so this is the row holding tile t).
__device__ __forceinline__ i64 row_of_tile(const u64* tiles, i64 lo, i64 bs, u64 t) {
  i64 hi = bs;
  while (lo < hi) {
    const i64 mid = lo + ((hi - lo) >> 1);
    if (tiles[mid] <= t) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo - 1;
}

// Whether [lo, lo + count) (count >= 1, wrapping arithmetic) lies inside [0, limit) without wrapping.
__device__ __forceinline__ bool span_in(i64 lo, i64 count, i64 limit) {
  const i64 last = wadd(lo, count - 1);
  return lo >= 0 && last >= lo && last < limit;
}

// The predecessor slot from lane - 1 (lane 0: from lane 31, which gives `carry`, its slot of the round before).
// kWide: a slot may not fit in 32 bits (a LUT value, or INVALID_SLOT off the checked path); otherwise it is an
// int32 req_to_token value and one 32-bit shuffle moves it.
template <bool kWide>
__device__ __forceinline__ i64 left_slot(i64 mine, i64 carry, int lane) {
  const i64 give = lane == 31 ? carry : mine;
  if (kWide) return __shfl_sync(kFullMask, give, (lane + 31) & 31);
  return (i64)__shfl_sync(kFullMask, (int)give, (lane + 31) & 31);
}

template <int kThreads, bool kHasLut, bool kHasPool>
__device__ void plan_tiles(const PlanInputs& in, const TileRows& rows, const TokenPool& pool, i64 n, i64 block,
                           i64 blocks, const EntryOutputs& out) {
  constexpr int U = kEntriesPerThread;
  constexpr i64 kTile = (i64)kThreads * U;
  constexpr i64 kSeg = 32 * U;  // a warp's consecutive entries within a tile
  const i64 bs = in.bs;
  const int lane = threadIdx.x & 31;
  const i64 seg_first = (i64)(threadIdx.x >> 5) * kSeg;  // this warp's first entry within a tile
  const u64 t_begin = tile_share(rows.ntiles, block, blocks);
  const u64 t_end = tile_share(rows.ntiles, block + 1, blocks);
  if (t_begin >= t_end) return;
  // row r's values, reloaded from shared memory only when the tiles move on to another row
  i64 r = rows.first_row;
  u64 first_tile = 0, next_row_tile = 0;  // row r's first tile, row r + 1's (past the last row: never reached)
  i64 row_lo = 0, hi = 0, rp = 0, base = 0, vlen = 0;
  auto enter_row = [&]() {
    first_tile = rows.tiles[r];
    next_row_tile = r + 1 < bs ? rows.tiles[r + 1] : ~0ULL;
    row_lo = r == 0 ? 0 : iclamp((i64)rows.offs[r], 0, n);
    hi = r == bs - 1 ? n : iclamp((i64)rows.offs[r + 1], 0, n);
    rp = rows.rp[r];
    base = wsub(rows.ws[r], (i64)rows.offs[r]);  // pos = base + e (wrapping, as the reference)
    vlen = kHasPool ? pool.valid_lens[r] : 0;
  };
  enter_row();
  for (u64 t = t_begin; t < t_end; ++t) {
    if (t >= next_row_tile) {
      r = row_of_tile(rows.tiles, r + 1, bs, t);
      enter_row();
    }
    const i64 seg_lo = row_lo + (i64)(t - first_tile) * kTile + seg_first;  // < the row's end + kTile: no wrap
    if (seg_lo >= hi) continue;  // the row ends before this warp's entries (warp-uniform: no shuffle skipped)
    const i64 e = seg_lo + lane;
    const i64 p_lo = wadd(base, seg_lo);
    // the fast path per warp, not per tile: a row that is no multiple of the tile still takes it up to its
    // last partial segment
    bool fast = hi - seg_lo >= kSeg && rp >= 0 && rp < in.rtt_rows && span_in(p_lo, kSeg, in.rtt_cols);
    if (kHasPool) {
      fast = fast && rp < pool.rows && span_in(wadd(p_lo, pool.offset), kSeg, imin(vlen, pool.cols));
    }
    i64 slot[U];
    i64 tok[U];
    i64 prev0 = -1;  // round 0's predecessor slot (lane 0 only)
    if (fast) {
      const i64 p0 = p_lo + lane;  // no wrap: inside the span just checked
      const int* src = in.req_to_token + rp * in.rtt_cols + p0;
#pragma unroll
      for (int u = 0; u < U; ++u) slot[u] = translate<kHasLut>(in, (i64)src[32 * u]);
      if (lane == 0 && p0 > 0) prev0 = translate<kHasLut>(in, (i64)src[-1]);  // p0 - 1 is in range too
      if (kHasPool) {
        const int* tp = pool.data + rp * pool.cols + (p0 + pool.offset);
#pragma unroll
        for (int u = 0; u < U; ++u) tok[u] = (i64)tp[32 * u];
      }
      i64* const o_slot = out.slots + e;
      i64* const o_tok = out.tokens + e;
      i64* const o_pos = out.positions + e;
      i64* const o_prev = out.prevs + e;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        KVC_PLAN_ST(o_pos + 32 * u, p0 + 32 * u);
        KVC_PLAN_ST(o_tok + 32 * u, kHasPool ? tok[u] : (i64)-1);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const i64 left = left_slot<kHasLut>(slot[u], slot[u > 0 ? u - 1 : 0], lane);
        KVC_PLAN_ST(o_slot + 32 * u, KVC_STORED_SLOT(in, rp, p0 + 32 * u, slot[u]));
        // every position here is > 0 but lane 0's of round 0 (whose prev0 stays -1 at position 0)
        KVC_PLAN_ST(o_prev + 32 * u, (u == 0 && lane == 0) ? prev0 : left);
      }
      continue;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const i64 eu = e + 32 * u;
      const i64 pos = wadd(base, eu);
      slot[u] = -1;
      tok[u] = -1;
      if (eu < hi) {
        slot[u] = read_slot<kHasLut>(in, rp, pos);
        if (u == 0 && lane == 0 && pos > 0) prev0 = read_slot<kHasLut>(in, rp, pos - 1);
        if (kHasPool) {
          const i64 q = wadd(pos, pool.offset);
          if (q >= 0 && q < vlen && q < pool.cols && rp >= 0 && rp < pool.rows) {
            tok[u] = (i64)pool.data[rp * pool.cols + q];
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const i64 left = left_slot<true>(slot[u], slot[u > 0 ? u - 1 : 0], lane);
      const i64 eu = e + 32 * u;
      if (eu < hi) {
        const i64 pos = wadd(base, eu);
        out.positions[eu] = pos;
        out.tokens[eu] = tok[u];
        out.slots[eu] = KVC_STORED_SLOT(in, rp, pos, slot[u]);
        out.prevs[eu] = pos > 0 ? ((lane == 0 && u == 0) ? prev0 : left) : (i64)-1;
      }
    }
  }
}

}  // namespace kvc

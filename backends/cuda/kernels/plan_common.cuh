// plan_common.cuh: the plan's two stages as block-level device functions, shared by plan.cu (both stages
// fused in one launch), plan_offsets.cu and plan_entries.cu. Semantics: backends/torch_ref/_plan_common.py.
//
// Slot reads follow torch_ref's one rule: req_to_token[rp, pos] outside the tensor reads INVALID_SLOT; a value
// below 0 passes the full->SWA translation unchanged; a value at or past the LUT's length becomes INVALID_SLOT.
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

template <bool kHasLut>
__device__ __forceinline__ i64 read_slot(const PlanInputs& in, i64 rp, i64 pos) {
  const bool ok = rp >= 0 && rp < in.rtt_rows && pos >= 0 && pos < in.rtt_cols;
  const i64 raw = ok ? (i64)in.req_to_token[rp * in.rtt_cols + pos] : kInvalidSlot;
  if (!kHasLut || raw < 0) return raw;
  return raw < in.lut_len ? in.lut[raw] : kInvalidSlot;
}

__device__ __forceinline__ i64 window_start(i64 prefix, i64 window) {
  return window > 0 ? imax(wsub(prefix, window), 0) : 0;
}

// Exclusive prefix sum of a[0, n) in place (uint64, wrapping like torch's int64 cumsum), by a block of
// kThreads threads (each sums a contiguous run, then a warp-shuffle scan of the run totals). Returns the total.
// `warp_tmp` holds kThreads / 32 values. Starts and ends with a block barrier.
template <int kThreads>
__device__ u64 block_exclusive_scan(u64* a, i64 n, u64* warp_tmp) {
  constexpr int kWarps = kThreads / 32;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  __syncthreads();
  const i64 per = (n + kThreads - 1) / kThreads;
  const i64 lo = imin((i64)tid * per, n);
  const i64 hi = imin(lo + per, n);
  u64 s = 0;
  for (i64 i = lo; i < hi; ++i) s += a[i];
  u64 x = s;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const u64 y = __shfl_up_sync(kFullMask, x, off);
    if (lane >= off) x += y;
  }
  if (lane == 31) warp_tmp[warp] = x;
  __syncthreads();
  if (warp == 0) {
    u64 w = lane < kWarps ? warp_tmp[lane] : 0;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const u64 y = __shfl_up_sync(kFullMask, w, off);
      if (lane >= off) w += y;
    }
    if (lane < kWarps) warp_tmp[lane] = w;
  }
  __syncthreads();
  u64 run = (warp > 0 ? warp_tmp[warp - 1] : 0) + (x - s);
  const u64 total = warp_tmp[kWarps - 1];
  for (i64 i = lo; i < hi; ++i) {
    const u64 v = a[i];
    a[i] = run;
    run += v;
  }
  __syncthreads();
  return total;
}

// Each row's verify length into sm[0, bs), then their exclusive scan; returns the total. With `rows` (the
// tile path's per-row shared arrays) each row's req_pool_index and window start are kept there too.
template <int kThreads>
__device__ u64 verify_offsets(const PlanInputs& in, u64* sm, u64* warp_tmp, i64* rows_rp = nullptr,
                              i64* rows_ws = nullptr) {
  for (i64 r = threadIdx.x; r < in.bs; r += kThreads) {
    const i64 rp = in.req_pool_indices[r];
    const i64 prefix = in.prefix_lens[r];
    const i64 ws = window_start(prefix, in.window);
    const i64 len = imax(wsub(prefix, ws), 0);
    sm[r] = rp != kReqPoolIdxPadding ? (u64)len : 0;
    if (rows_rp != nullptr) {
      rows_rp[r] = rp;
      rows_ws[r] = ws;
    }
  }
  return block_exclusive_scan<kThreads>(sm, in.bs, warp_tmp);
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

// Stage 1 by one block, once sm holds the verify offsets (verify_offsets above) with total vtot: the scratch,
// num_valid and enable, then the write offsets and seeds (sm is reused for the write scan).
template <int kThreads, bool kHasLut>
__device__ void offsets_outputs(const PlanInputs& in, u64* sm, u64* warp_tmp, u64 vtot, i64 verify_capacity,
                                const OffsetsOutputs& out) {
  const int tid = threadIdx.x;
  const bool overflow = (i64)vtot > verify_capacity;
  if (out.verify_offsets_scratch != nullptr) {
    for (i64 r = tid; r < in.bs; r += kThreads) out.verify_offsets_scratch[r] = (i64)sm[r];
  }
  if (tid == 0) {
    if (out.verify_offsets_scratch != nullptr) out.verify_offsets_scratch[in.bs] = (i64)vtot;
    *out.verify_num_valid = (int)(u32)(overflow ? (u64)verify_capacity : vtot);  // int32: low 32 bits
    *out.verify_enable = overflow ? 0 : 1;
    *out.write_num_valid_reqs = (int)(u32)(u64)in.bs;
  }
  __syncthreads();  // sm is rewritten below
  for (i64 r = tid; r < in.bs; r += kThreads) {
    const i64 rp = in.req_pool_indices[r];
    const i64 ext = in.extend_seq_lens[r];
    sm[r] = rp != kReqPoolIdxPadding ? (u64)imax(ext, 0) : 0;
  }
  const u64 wtot = block_exclusive_scan<kThreads>(sm, in.bs, warp_tmp);
  for (i64 r = tid; r < in.bs; r += kThreads) {
    const i64 rp = in.req_pool_indices[r];
    const i64 prefix = in.prefix_lens[r];
    const i64 wlen = rp != kReqPoolIdxPadding ? imax(in.extend_seq_lens[r], 0) : 0;
    const bool has_seed = rp != kReqPoolIdxPadding && prefix > 0 && wlen > 0;
    out.write_offsets[r] = (i64)sm[r];
    out.write_seeds[r] = has_seed ? read_slot<kHasLut>(in, rp, wsub(prefix, 1)) : (i64)-1;
  }
  if (tid == 0) out.write_offsets[in.bs] = (i64)wtot;
  if (out.zero_tail) {
    for (i64 i = in.bs + 1 + tid; i < out.write_offsets_len; i += kThreads) out.write_offsets[i] = 0;
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
// offsets that are not sorted (hostile scratch, int64 wrap-around) pick the reference's row. bs >= 1.
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
      out.slots[e] = slot[u];
      out.tokens[e] = tok[u];
      out.positions[e] = pos[u];
      out.prevs[e] = prev[u];
    }
  }
}

// ---- the tile path --------------------------------------------------------------------------------------
// When the row offsets are sorted (always, unless int64 sums wrap or a hostile scratch is passed), the rows
// cover contiguous entry ranges: row 0 [0, offs[1]), row r [offs[r], offs[r+1]), the last row [offs[bs-1], n),
// each clipped to [0, n): exactly what searchsorted(offs, e, right=True) - 1, clamped, picks. Each range is cut
// into tiles of kTile = kThreads * kEntriesPerThread entries; block b takes tiles b, b + blocks, ... and finds
// a tile's row once per tile with a bisection over the rows' exclusive tile counts (in shared memory). Within
// a tile every entry has the same row: coalesced req_to_token reads, the predecessor slot from the
// neighbouring lane (a shuffle; lane 0 reads its own), coalesced stores, no per-entry search. Unsorted offsets
// take the per-entry bisection instead.
constexpr int kTileRowsMax = 1024;  // rows whose shared arrays (4 x 8 bytes each) the tile path keeps

// Dynamic shared memory of the tile path: offs | rp | ws | tiles, bs words each.
__host__ __device__ constexpr i64 tile_shared_words(i64 bs) { return 4 * bs; }

template <int kThreads, bool kHasLut, bool kHasPool>
__device__ void plan_entries_tiles(const PlanInputs& in, u64* offs, const i64* rows_rp, const i64* rows_ws,
                                   u64* tiles, u64* warp_tmp, const TokenPool& pool, i64 n, i64 block,
                                   i64 blocks, const EntryOutputs& out) {
  constexpr int U = kEntriesPerThread;
  constexpr i64 kTile = (i64)kThreads * U;
  const i64 bs = in.bs;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  // each row's entry range and tile count
  for (i64 r = tid; r < bs; r += kThreads) {
    const i64 lo = r == 0 ? 0 : iclamp((i64)offs[r], 0, n);
    const i64 hi = r == bs - 1 ? n : iclamp((i64)offs[r + 1], 0, n);
    tiles[r] = hi > lo ? (u64)((hi - lo + kTile - 1) / kTile) : 0;
  }
  const u64 ntiles = block_exclusive_scan<kThreads>(tiles, bs, warp_tmp);
  for (u64 t = (u64)block; t < ntiles; t += (u64)blocks) {
    i64 lo_r = 0;
    i64 hi_r = bs;
    while (lo_r < hi_r) {  // the last row whose first tile is <= t (rows without tiles share the next's start)
      const i64 mid = lo_r + ((hi_r - lo_r) >> 1);
      if (tiles[mid] <= t) {
        lo_r = mid + 1;
      } else {
        hi_r = mid;
      }
    }
    const i64 r = lo_r - 1;
    const i64 row_lo = r == 0 ? 0 : iclamp((i64)offs[r], 0, n);
    const i64 row_hi = r == bs - 1 ? n : iclamp((i64)offs[r + 1], 0, n);
    const i64 rp = rows_rp[r];
    const i64 base = wsub(rows_ws[r], (i64)offs[r]);  // pos = base + e (wrapping, as the reference)
    const i64 e0 = row_lo + (i64)(t - tiles[r]) * kTile + tid;
    i64 vlen = 0;
    if (kHasPool) vlen = pool.valid_lens[r];
    i64 slot[U], prev[U], pos[U], tok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const i64 e = e0 + (i64)u * kThreads;
      pos[u] = wadd(base, e);
      slot[u] = -1;
      prev[u] = -1;
      tok[u] = -1;
      if (e < row_hi) {
        slot[u] = read_slot<kHasLut>(in, rp, pos[u]);
        if (lane == 0 && pos[u] > 0) prev[u] = read_slot<kHasLut>(in, rp, pos[u] - 1);
        if (kHasPool) {
          const i64 q = wadd(pos[u], pool.offset);
          if (q >= 0 && q < vlen && q < pool.cols && rp >= 0 && rp < pool.rows) {
            tok[u] = (i64)pool.data[rp * pool.cols + q];
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      // entry e - 1 is lane - 1's entry u: same row, position pos - 1
      const i64 left = __shfl_up_sync(kFullMask, slot[u], 1);
      const i64 e = e0 + (i64)u * kThreads;
      if (e < row_hi) {
        const i64 pv = pos[u] > 0 ? (lane == 0 ? prev[u] : left) : (i64)-1;
        out.slots[e] = slot[u];
        out.tokens[e] = tok[u];
        out.positions[e] = pos[u];
        out.prevs[e] = pv;
      }
    }
  }
}

// Whether offs[0, bs) is sorted (as int64); block-wide, every thread gets the answer.
template <int kThreads>
__device__ __forceinline__ bool offsets_sorted(const u64* offs, i64 bs) {
  int bad = 0;
  for (i64 r = 1 + threadIdx.x; r < bs; r += kThreads) bad |= (i64)offs[r] < (i64)offs[r - 1];
  return !__syncthreads_or(bad);
}

}  // namespace kvc

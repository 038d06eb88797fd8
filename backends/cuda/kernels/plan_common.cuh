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

// Each row's verify length into sm[0, bs), then their exclusive scan; returns the total.
template <int kThreads>
__device__ u64 verify_offsets(const PlanInputs& in, u64* sm, u64* warp_tmp) {
  for (i64 r = threadIdx.x; r < in.bs; r += kThreads) {
    const i64 rp = in.req_pool_indices[r];
    const i64 prefix = in.prefix_lens[r];
    const i64 len = imax(wsub(prefix, window_start(prefix, in.window)), 0);
    sm[r] = rp != kReqPoolIdxPadding ? (u64)len : 0;
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

constexpr int kEntriesPerThread = 4;

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

}  // namespace kvc

// plan_entries.cu: plan stage 2 alone (SGLang's launch_plan_entries_kernel): entries [0, min(total, capacity))
// where total = verify_offsets_scratch[bs], unless verify_enable == 0; later entries are untouched.
//
// Semantics: backends/torch_ref/plan_entries.py. Each block copies the scratch's bs offsets into shared memory;
// with bs <= kTileRowsMax and a sorted scratch it takes tiles of one row each (plan_common.cuh's tile path),
// otherwise it grid-strides over the entries, each row found by the same bisection as torch.searchsorted (so
// an unsorted scratch picks the reference's rows). The grid depends only on shapes: the capacity and bs
// (capturable).
// Specializations: KVC_THREADS, KVC_HAS_LUT, KVC_HAS_POOL. Dynamic shared memory: 32 * bs bytes when
// bs <= kTileRowsMax, else 8 * bs (bs >= 1).
#include "plan_common.cuh"

#ifndef KVC_THREADS
#define KVC_THREADS 256
#endif
#ifndef KVC_HAS_LUT
#define KVC_HAS_LUT 0
#endif
#ifndef KVC_HAS_POOL
#define KVC_HAS_POOL 0
#endif

using namespace kvc;

extern "C" __global__ void __launch_bounds__(KVC_THREADS)
    kvc_plan_entries(const long long* __restrict__ req_pool_indices, const long long* __restrict__ prefix_lens,
                     const int* __restrict__ req_to_token, long long rtt_rows, long long rtt_cols,
                     const long long* __restrict__ lut, long long lut_len, long long window, long long bs,
                     const long long* __restrict__ scratch, const int* __restrict__ verify_enable,
                     long long capacity, long long* __restrict__ out_slots, long long* __restrict__ out_tokens,
                     long long* __restrict__ out_positions, long long* __restrict__ out_prevs,
                     const int* __restrict__ pool, long long pool_rows, long long pool_cols,
                     const long long* __restrict__ valid_lens, long long token_offset) {
  KVC_DYNAMIC_SHARED(u64, sm);
  __shared__ u64 warp_tmp[KVC_THREADS / 32];
  __shared__ i64 first_row;  // the tile path's row of this block's first tile (set by the scan's emit pass)
  const i64 total = (i64)ld_nc(scratch + bs);
  const i64 n = *verify_enable != 0 ? iclamp(total, 0, capacity) : 0;
  if (n == 0) return;
  const bool tile_rows = bs <= kTileRowsMax;  // the host then sizes shared memory for the tile path's arrays
  i64* rows_rp = (i64*)(sm + bs);
  i64* rows_ws = (i64*)(sm + 2 * bs);
  u64* tiles = sm + 3 * bs;
  for (i64 r = threadIdx.x; r < bs; r += KVC_THREADS) {
    sm[r] = ld_nc(scratch + r);
    if (tile_rows) {
      rows_rp[r] = req_pool_indices[r];
      rows_ws[r] = window_start(prefix_lens[r], window);
    }
  }
  __syncthreads();
  const PlanInputs in{req_pool_indices, prefix_lens, nullptr, req_to_token, rtt_rows, rtt_cols,
                      lut, lut_len, window, bs};
  const TokenPool tp{pool, pool_rows, pool_cols, valid_lens, token_offset};
  const EntryOutputs eo{out_slots, out_tokens, out_positions, out_prevs};
  if (tile_rows) {
    // each row's tiles over its entry range clipped to [0, n), scanned; and whether the scratch is sorted
    constexpr i64 kTile = (i64)KVC_THREADS * kEntriesPerThread;
    u64 ntiles[1] = {0};  // block_scan fills it before its emit pass, which reads it
    const bool unsorted = block_scan<KVC_THREADS, 1>(
        bs, warp_tmp, ntiles,
        [&](i64 r, u64 (&v)[1]) {
          const i64 lo = r == 0 ? 0 : iclamp((i64)sm[r], 0, n);
          const i64 hi = r == bs - 1 ? n : iclamp((i64)sm[r + 1], 0, n);
          v[0] = hi > lo ? (u64)((hi - lo + kTile - 1) / kTile) : 0;
        },
        [&](i64 r, const u64 (&off)[1], const u64 (&v)[1]) {
          tiles[r] = off[0];
          // ntiles holds the total once the emit pass runs: the row of this block's first tile
          if (row_holds_tile(off[0], v[0], tile_share(ntiles[0], (i64)blockIdx.x, (i64)gridDim.x))) first_row = r;
          return r + 1 < bs && (i64)sm[r + 1] < (i64)sm[r];
        });
    if (!unsorted) {
      const TileRows rows{sm, rows_rp, rows_ws, tiles, ntiles[0], first_row};
      plan_tiles<KVC_THREADS, KVC_HAS_LUT != 0, KVC_HAS_POOL != 0>(in, rows, tp, n, (i64)blockIdx.x,
                                                                   (i64)gridDim.x, eo);
      return;
    }
  }
  const i64 step = (i64)gridDim.x * KVC_THREADS * kEntriesPerThread;
  const i64 first = (i64)blockIdx.x * KVC_THREADS * kEntriesPerThread + threadIdx.x;
  for (i64 e0 = first; e0 < n; e0 += step) {
    plan_entries_batch<KVC_HAS_LUT != 0, KVC_HAS_POOL != 0>(in, sm, tp, e0, KVC_THREADS, n, eo);
  }
}

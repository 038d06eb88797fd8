// plan.cu: the whole plan in one launch (verify entries, write offsets and seeds, overflow decision).
//
// Semantics: backends/torch_ref/plan.py. Block 0 writes the stage-1 outputs (scratch if the plan has one,
// num_valid, enable, write offsets zeroed past bs, seeds, num_valid_reqs) from one block scan of the rows'
// (verify length, write length) pairs. Blocks 1.. each scan the rows' verify lengths themselves (bs <= 4096
// rows: two 8-byte loads per row, two block barriers), so no block waits for another and no scratch is
// needed, then cover the entries [0, total) unless the plan overflows: with bs <= kTileRowsMax (the offsets,
// saturated prefix sums, are always sorted) by tiles of one row each (plan_common.cuh's tile path: no per-entry
// search, coalesced reads and stores; the same scan counts each row's tiles and finds the row of the block's
// first tile); otherwise grid-striding, each entry's row found by an upper-bound bisection over the offsets in
// shared memory. The grid depends only on shapes: the capacity and bs (capturable).
//
// Specializations: KVC_THREADS, KVC_HAS_LUT, KVC_HAS_POOL. Dynamic shared memory: 32 * max(bs, 1) bytes when
// bs <= kTileRowsMax (offsets, req_pool_indices, window starts, tile counts), else 8 * bs.
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
#ifndef KVC_PLAN_MIN_BLOCKS
#define KVC_PLAN_MIN_BLOCKS 0  // > 0: blocks per SM ptxas must fit (a register cap the sweeps try); 0: its choice
#endif
#if KVC_PLAN_MIN_BLOCKS > 0
#define KVC_PLAN_BOUNDS __launch_bounds__(KVC_THREADS, KVC_PLAN_MIN_BLOCKS)
#else
#define KVC_PLAN_BOUNDS __launch_bounds__(KVC_THREADS)
#endif

using namespace kvc;

extern "C" __global__ void KVC_PLAN_BOUNDS
    kvc_plan(const long long* __restrict__ req_pool_indices, const long long* __restrict__ prefix_lens,
             const long long* __restrict__ extend_seq_lens, const int* __restrict__ req_to_token, long long rtt_rows,
             long long rtt_cols, const long long* __restrict__ lut, long long lut_len, long long window, long long bs,
             long long verify_capacity, long long out_capacity, long long* __restrict__ out_slots, long long* __restrict__ out_tokens,
             long long* __restrict__ out_positions, long long* __restrict__ out_prevs,
             int* __restrict__ out_num_valid, int* __restrict__ out_enable, long long* __restrict__ scratch,
             long long* __restrict__ write_offsets, long long write_offsets_len, long long* __restrict__ write_seeds,
             int* __restrict__ write_num_valid_reqs, const int* __restrict__ pool, long long pool_rows,
             long long pool_cols, const long long* __restrict__ valid_lens, long long token_offset) {
  KVC_DYNAMIC_SHARED(u64, sm);
  __shared__ u64 warp_tmp[2 * KVC_THREADS / 32];
  __shared__ i64 first_row;  // the tile path's row of this block's first tile (set by the scan's emit pass)
  const PlanInputs in{req_pool_indices, prefix_lens, extend_seq_lens, req_to_token, rtt_rows, rtt_cols,
                      lut, lut_len, window, bs};
  if (blockIdx.x == 0) {
    const OffsetsOutputs out{scratch, write_offsets, write_seeds, out_num_valid, out_enable, write_num_valid_reqs,
                             write_offsets_len, true};
    plan_offsets_block<KVC_THREADS, KVC_HAS_LUT != 0>(in, warp_tmp, verify_capacity, out);
    return;
  }
  const TokenPool tp{pool, pool_rows, pool_cols, valid_lens, token_offset};
  const EntryOutputs eo{out_slots, out_tokens, out_positions, out_prevs};
  u64 tot[2] = {0, 0};
  bool sorted = false;
  const bool tile_rows = bs <= kTileRowsMax;  // the host then sizes shared memory for the tile path's arrays
  u64* tiles = sm + 3 * bs;
  i64* rows_rp = (i64*)(sm + bs);
  i64* rows_ws = (i64*)(sm + 2 * bs);
  if (tile_rows) {
    // one scan of the (verify length, tile count) pairs: offsets, tiles, rp and window starts into shared
    // memory; the offsets are saturated sums, never decreasing, so the tile path always applies
    constexpr i64 kTile = (i64)KVC_THREADS * kEntriesPerThread;
    sorted = !block_scan<KVC_THREADS, 2>(
        bs, warp_tmp, tot,
        [&](i64 r, u64 (&v)[2]) {
          const PlanRow row = plan_row(in, r);
          v[0] = row.len;
          v[1] = (row.len + (u64)(kTile - 1)) / (u64)kTile;  // len < 2^63: no wrap
        },
        [&](i64 r, const u64 (&off)[2], const u64 (&v)[2]) {
          const PlanRow row = plan_row(in, r);
          sm[r] = off[0];
          tiles[r] = off[1];
          rows_rp[r] = row.rp;
          rows_ws[r] = row.ws;
          // tot holds the totals once the emit pass runs: the row of this block's first tile
          if (row_holds_tile(off[1], v[1], tile_share(tot[1], (i64)blockIdx.x - 1, (i64)gridDim.x - 1))) {
            first_row = r;
          }
          return false;  // saturated sums never decrease: no row is out of order
        });
  } else {
    u64 one[1];
    block_scan<KVC_THREADS, 1>(
        bs, warp_tmp, one, [&](i64 r, u64 (&v)[1]) { v[0] = plan_row(in, r).len; },
        [&](i64 r, const u64 (&off)[1], const u64 (&)[1]) {
          sm[r] = off[0];
          return false;
        });
    tot[0] = one[0];
  }
  if ((i64)tot[0] > verify_capacity) return;  // overflow: enable = 0, entries untouched
  const i64 n = imin((i64)tot[0], out_capacity);  // == the total under the contract
  if (n <= 0) return;
  if (sorted) {
    // row r's range is then [offs[r], offs[r] + len) clipped to n, so its cdiv(len, kTile) tiles cover it
    // (tiles past n hold no entry); no overflow bounds their count by total / kTile + bs
    const TileRows rows{sm, rows_rp, rows_ws, tiles, tot[1], first_row};
    plan_tiles<KVC_THREADS, KVC_HAS_LUT != 0, KVC_HAS_POOL != 0>(in, rows, tp, n, (i64)blockIdx.x - 1,
                                                                 (i64)gridDim.x - 1, eo);
    return;
  }
  // each thread takes kEntriesPerThread entries a blockwide stride apart (coalesced), then moves on by the grid
  const i64 step = (i64)(gridDim.x - 1) * KVC_THREADS * kEntriesPerThread;
  const i64 first = (i64)(blockIdx.x - 1) * KVC_THREADS * kEntriesPerThread + threadIdx.x;
  for (i64 e0 = first; e0 < n; e0 += step) {
    plan_entries_batch<KVC_HAS_LUT != 0, KVC_HAS_POOL != 0>(in, sm, tp, e0, KVC_THREADS, n, eo);
  }
}

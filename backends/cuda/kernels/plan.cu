// plan.cu: the whole plan in one launch (verify entries, write offsets and seeds, overflow decision).
//
// Semantics: backends/torch_ref/plan.py. Every block first computes the rows' exclusive verify offsets itself
// (bs <= 4096 rows: two 8-byte loads per row and a block scan in shared memory), so no block waits for another
// and no scratch is needed. Block 0 then writes the stage-1 outputs (scratch if the plan has one, num_valid,
// enable, write offsets zeroed past bs, seeds, num_valid_reqs); blocks 1.. cover the entries [0, total)
// unless the plan overflows: with bs <= kTileRowsMax and sorted offsets (always, unless sums wrap) by tiles of
// one row each (plan_common.cuh's tile path: no per-entry search, coalesced reads and stores); otherwise
// grid-striding, each entry's row found by an upper-bound bisection over the offsets in shared memory.
// The grid depends only on verify_capacity (capturable).
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

using namespace kvc;

extern "C" __global__ void __launch_bounds__(KVC_THREADS)
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
  __shared__ u64 warp_tmp[KVC_THREADS / 32];
  const PlanInputs in{req_pool_indices, prefix_lens, extend_seq_lens, req_to_token, rtt_rows, rtt_cols,
                      lut, lut_len, window, bs};
  const bool tile_rows = bs <= kTileRowsMax;  // the host then sizes shared memory for the tile path's arrays
  i64* rows_rp = tile_rows ? (i64*)(sm + bs) : nullptr;
  i64* rows_ws = tile_rows ? (i64*)(sm + 2 * bs) : nullptr;
  const u64 vtot = verify_offsets<KVC_THREADS>(in, sm, warp_tmp, rows_rp, rows_ws);
  if (blockIdx.x == 0) {
    const OffsetsOutputs out{scratch, write_offsets, write_seeds, out_num_valid, out_enable, write_num_valid_reqs,
                             write_offsets_len, true};
    offsets_outputs<KVC_THREADS, KVC_HAS_LUT != 0>(in, sm, warp_tmp, vtot, verify_capacity, out);
    return;
  }
  if ((i64)vtot > verify_capacity) return;  // overflow: enable = 0, entries untouched
  const i64 n = imin((i64)vtot, out_capacity);  // == vtot under the contract (verify_capacity == out_capacity)
  if (n <= 0) return;
  const TokenPool tp{pool, pool_rows, pool_cols, valid_lens, token_offset};
  const EntryOutputs eo{out_slots, out_tokens, out_positions, out_prevs};
  if (tile_rows && offsets_sorted<KVC_THREADS>(sm, bs)) {
    plan_entries_tiles<KVC_THREADS, KVC_HAS_LUT != 0, KVC_HAS_POOL != 0>(
        in, sm, rows_rp, rows_ws, sm + 3 * bs, warp_tmp, tp, n, (i64)blockIdx.x - 1, (i64)gridDim.x - 1, eo);
    return;
  }
  // each thread takes kEntriesPerThread entries a blockwide stride apart (coalesced), then moves on by the grid
  const i64 step = (i64)(gridDim.x - 1) * KVC_THREADS * kEntriesPerThread;
  const i64 first = (i64)(blockIdx.x - 1) * KVC_THREADS * kEntriesPerThread + threadIdx.x;
  for (i64 e0 = first; e0 < n; e0 += step) {
    plan_entries_batch<KVC_HAS_LUT != 0, KVC_HAS_POOL != 0>(in, sm, tp, e0, KVC_THREADS, n, eo);
  }
}

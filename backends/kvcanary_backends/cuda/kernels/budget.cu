// budget.cu: a verification budget's filter of a verify plan, and its cursors' advance, in one launch.
//
// Semantics: backends/torch_ref/budget.py. Launch: grid (bs), 128 threads. Block b sums the kept entries of the
// requests before it (kept = count - max(count - newest - stride, 0), from the offsets alone: a block-wide sum),
// reads its row's cursor (a token position, anchored at the first entry's position: a sliding window's dropped
// entries never shift it), copies its kept entries (three runs of the full plan: the window's part wrapped to
// index 0, the rest of the window, the newest entries) below the output's capacity, then thread 0 moves the
// cursor by advance * enable * stride (unless the request has no entries: padding rows name row 0, where a real
// request's cursor may live, so no two blocks write one cursor), writes the count when its request holds the
// full plan's last entry (block 0 when the plan is empty, the last block when num_valid lies past the batch)
// and block 0 the enable and, given the overflow counter (skipped, non-null), adds 1 - enable to it.
// Host-side sizes only (capturable).
#include "kvcanary_common.cuh"

#define KVC_BUDGET_THREADS 128

using namespace kvc;

extern "C" __global__ void __launch_bounds__(KVC_BUDGET_THREADS)
    kvc_verify_budget(const long long* __restrict__ scratch, const long long* __restrict__ slots,
                      const long long* __restrict__ tokens, const long long* __restrict__ positions,
                      const long long* __restrict__ prev, const int* __restrict__ num_valid,
                      const int* __restrict__ enable, const long long* __restrict__ req_pool_indices,
                      long long* cursor, const long long* __restrict__ advance, long long* __restrict__ out_slots,
                      long long* __restrict__ out_tokens, long long* __restrict__ out_positions,
                      long long* __restrict__ out_prev, int* __restrict__ out_num_valid, int* __restrict__ out_enable,
                      long long* __restrict__ skipped, long long bs, long long cap_in, long long cap_out,
                      long long num_rows, long long newest, long long stride) {
  __shared__ i64 warp_sum[KVC_BUDGET_THREADS / 32];
  const i64 b = blockIdx.x;
  const int tid = threadIdx.x;
  i64 before = 0;  // kept entries of the requests before this one: where this one's start in the budget's plan
  for (i64 r = tid; r < b; r += KVC_BUDGET_THREADS) {
    const i64 cnt = imax(scratch[r + 1] - scratch[r], 0);
    before += imin(cnt - imax(imax(cnt - newest, 0) - stride, 0), cap_out);  // past cap_out: none lands, no overflow
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) before += (i64)__shfl_xor_sync(kFullMask, before, off);
  if ((tid & 31) == 0) warp_sum[tid >> 5] = before;
  const i64 row = iclamp(req_pool_indices[b], 0, num_rows - 1);
  const i64 cur = cursor[row];  // read by every thread before thread 0 writes it (after the barrier)
  __syncthreads();
  i64 koff = 0;
#pragma unroll
  for (int w = 0; w < KVC_BUDGET_THREADS / 32; ++w) koff += warp_sum[w];
  const i64 start = scratch[b];
  const i64 end = scratch[b + 1];
  const i64 count = imax(end - start, 0);  // a request holds no fewer than no entries
  const i64 older = imax(count - newest, 0);
  const i64 gap = imax(older - stride, 0);
  const i64 take = older - gap;
  const i64 kept = count - gap;
  const i64 modulus = imax(older, 1);
  const i64 n = imin((i64)num_valid[0], cap_in);  // a count past the plan names no entry beyond it
  // the cursor is a token position, anchored at the first entry's (0 outside the plan's count)
  const i64 base = (start >= 0 && start < n) ? positions[start] : 0;
  i64 first = wsub(cur, base) % modulus;  // C's remainder takes the dividend's sign
  if (first < 0) first += modulus;  // torch.remainder: the divisor's sign
  const i64 wrap = imax(first - gap, 0);
  const i64 stop = imin(kept, cap_out - koff);  // the entries that land below cap_out
  for (i64 k = tid; k < stop; k += KVC_BUDGET_THREADS) {
    const i64 j = k < wrap ? k : (k < take ? first + k - wrap : older + k - take);
    const i64 src = start + j;
    const i64 dest = koff + k;
    if (dest >= 0 && dest < cap_out && src >= 0 && src < n && src < cap_in) {
      out_slots[dest] = slots[src];
      out_tokens[dest] = tokens[src];
      out_positions[dest] = positions[src];
      out_prev[dest] = prev[src];
    }
  }
  if (tid != 0) return;
  const i64 last = n - 1;
  if (b == 0 && last < start) {
    out_num_valid[0] = 0;
  } else if ((start <= last && last < end) || (b == bs - 1 && last >= end)) {
    const i64 lim = imin(n - start, count);  // this request's entries below n
    const i64 below = imin(wrap, lim) + imax(imin(lim, first + take - wrap) - first, 0) + imax(lim - older, 0);
    out_num_valid[0] = (int)imin(koff + iclamp(below, 0, cap_out), cap_out);
  }
  if (b == 0) {
    const int en = enable[0];
    out_enable[0] = en;
    if (skipped != nullptr) skipped[0] += 1 - (i64)en;  // the full plan's overflow, counted once per launch
  }
  if (count <= 0) return;  // a request of no entries (padding, a first chunk) leaves its row's cursor
  // an overflowed plan (enable 0) moves no window: its verifies are off
  i64 step = (i64)((u64)advance[0] * (u64)(i64)enable[0] * (u64)stride) % modulus;
  if (step < 0) step += modulus;
  const i64 room = modulus - step;  // first + step wraps past the older entries when first >= room (no overflow)
  cursor[row] = wadd(base, first >= room ? first - room : first + step);
}

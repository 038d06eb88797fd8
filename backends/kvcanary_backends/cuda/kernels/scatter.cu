// scatter.cu: copy each request's token ids into its row of the expected-token pool (int32, low 32 bits).
//
// Semantics: backends/torch_ref/scatter.py: request r covers columns [0, width_r) of row rp_r, with
// width_r = clamp(min(offsets[r+1] - offsets[r], cols), 0) (the difference exact, never wrapped; 0 for a row
// outside the pool); when several requests name one row, the last one covering a column owns it, and writes it
// only if its flat index is inside flat_in.
// Launch: grid (bs, Y), 256 threads. Block (r, y) owns, of request r's columns [0, width_r), the y-th of Y equal
// shares, and issues its first round of loads (coalesced 8-byte loads, 4 per thread) before it finds the widest
// later request naming the same row (a block-wide max over requests r+1..bs-1), so that search runs while the
// loads are in flight; it then stores the columns of its share at or past that width (columns below it belong
// to a later request): 4-byte streaming stores (evict-first: the pool is read by a later launch, not this one),
// no two blocks write one cell. Host-side sizes only (capturable).
#include "kvcanary_common.cuh"

#define KVC_SCATTER_THREADS 256

using namespace kvc;

namespace {

// Columns request r covers: min(offsets[r+1] - offsets[r], cols) where that difference is positive, else 0. The
// difference is exact (as u64: it may exceed INT64_MAX when the offsets straddle 0), never wrapped.
__device__ __forceinline__ i64 covered(const i64* offsets, i64 r, i64 cols) {
  const i64 a = offsets[r];
  const i64 b = offsets[r + 1];
  if (b <= a) return 0;
  const u64 d = (u64)b - (u64)a;
  return d < (u64)cols ? (i64)d : cols;
}

// One round of a thread's loads: columns c, c + 256, ... (U of them) of request r, at flat index start + column;
// ok[u] where the column is below c1 and its flat index inside flat_in.
template <int U>
__device__ __forceinline__ void load_round(const long long* __restrict__ flat_in, i64 num_tokens, i64 start, i64 c,
                                           i64 c1, u64 (&v)[U], bool (&ok)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const i64 cu = c + (i64)u * KVC_SCATTER_THREADS;
    const i64 s = wadd(start, cu);
    ok[u] = cu < c1 && s >= 0 && s < num_tokens;
    v[u] = ok[u] ? ld_nc(flat_in + s) : 0;
  }
}

// A pool cell: a streaming store (st.global.cs), plain on the host emulation.
__device__ __forceinline__ void put(int* p, int v) {
#ifndef KVC_HOST_EMULATION
  __stcs(p, v);
#else
  *p = v;
#endif
}

}  // namespace

extern "C" __global__ void __launch_bounds__(KVC_SCATTER_THREADS)
    kvc_scatter(const long long* __restrict__ flat_in, long long num_tokens, const long long* __restrict__ offsets,
                const long long* __restrict__ req_pool_indices, long long bs, int* __restrict__ pool,
                long long rows, long long cols) {
  __shared__ i64 warp_max[KVC_SCATTER_THREADS / 32];
  const i64 r = blockIdx.x;
  const int tid = threadIdx.x;
  const i64 rp = req_pool_indices[r];
  if (rp < 0 || rp >= rows) return;
  const i64 width = covered(offsets, r, cols);
  if (width <= 0) return;
  const i64 start = offsets[r];
  const i64 per = (width + gridDim.y - 1) / gridDim.y;
  const i64 c0 = (i64)blockIdx.y * per;
  const i64 c1 = imin(c0 + per, width);
  constexpr int U = 4;  // columns per thread per round: all four loads issued before the stores
  constexpr i64 kStep = (i64)U * KVC_SCATTER_THREADS;
  u64 v[U];
  bool ok[U];
  load_round<U>(flat_in, num_tokens, start, c0 + tid, c1, v, ok);  // in flight during the search
  i64 cover = 0;  // columns a later request of the same row covers
  for (i64 q = r + 1 + tid; q < bs; q += KVC_SCATTER_THREADS) {
    if (req_pool_indices[q] == rp) cover = imax(cover, covered(offsets, q, cols));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) cover = imax(cover, (i64)__shfl_xor_sync(kFullMask, cover, off));
  if ((tid & 31) == 0) warp_max[tid >> 5] = cover;
  __syncthreads();
  cover = 0;
#pragma unroll
  for (int w = 0; w < KVC_SCATTER_THREADS / 32; ++w) cover = imax(cover, warp_max[w]);
  if (cover >= c1) return;
  int* row = pool + rp * cols;
  for (i64 c = c0 + tid; c < c1; c += kStep) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const i64 cu = c + (i64)u * KVC_SCATTER_THREADS;
      if (ok[u] && cu >= cover) put(row + cu, (int)(u32)v[u]);
    }
    if (c + kStep < c1) load_round<U>(flat_in, num_tokens, start, c + kStep, c1, v, ok);
  }
}

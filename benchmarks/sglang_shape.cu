// sglang_shape.cu: a write kernel shaped like SGLang's published kv-canary write, for the head-to-head in
// benchmarks/bench_decode_write.py. Its launch shape and loop structure are SGLang's (one block of one thread
// per request slot of the capacity; the thread walks its request's tokens one after another and folds each
// token's real-KV strips inline before storing the record); its hashes and loads are this project's
// (kvcanary_common.cuh), so its records equal the backends' byte for byte and the benchmark checks that.
// Built by NVRTC like the backend's kernels (benchmarks/floors_cuda.py).
#include "kvcanary_common.cuh"

#ifndef KVC_PARTIAL
#define KVC_PARTIAL 1
#endif

using namespace kvc;

extern "C" __global__ void __launch_bounds__(1)
    kvc_shape_write_serial(unsigned char* buf, long long stride, const long long* offsets, const long long* seeds,
                           const int* num_valid_reqs, const long long* ids, const long long* poss,
                           const long long* locs, const int* chain_position_assert, long long* ring_rows,
                           long long ring_capacity, int* write_index, unsigned long long* slot_run_counter,
                           unsigned long long* kernel_run_counter, long long kind KVC_ALL_SOURCE_PARAMS) {
  KVC_DECLARE_SOURCES
  const long long r = blockIdx.x;
  if (r == 0) atomicAdd(kernel_run_counter, 1ULL);
  if (r >= (long long)*num_valid_reqs) return;
  const long long start = offsets[r];
  const long long end = offsets[r + 1];
  if (end <= start) return;
  const long long seed = seeds[r];
  u64 running = kAnchorHash;
  long long prev_pos = 0;
  const bool pos_assert = seed >= 0 && *chain_position_assert != 0;
  if (seed >= 0) {
    const unsigned char* p = buf + seed * stride;
    running = mix3(ld_cg(p + 16), ld_cg(p), ld_cg(p + 8));
    prev_pos = (long long)ld_cg(p + 8);
  }
  const Ring ring{ring_rows, ring_capacity, write_index, kind};
  u64 written = 0;
  for (long long i = start; i < end; ++i) {
    const long long slot = locs[i];
    if (slot < 0) continue;
    ++written;
    const long long tok = ids[i];
    const long long pos = poss[i];
    bool oob = false;
    const u64 rkv = fold_sources<KVC_NSRC, KVC_PARTIAL != 0>(src, slot, oob);
    if (pos_assert && pos != prev_pos + 1) ring.push(slot, pos, tok, tok, (i64)running, prev_pos + 1, kWritePositionMismatch);
    prev_pos = pos;
    unsigned char* p = buf + slot * stride;
    st_u64(p, (u64)tok);
    st_u64(p + 8, (u64)pos);
    st_u64(p + 16, running);
    st_u64(p + 24, rkv);
    running = mix3(running, (u64)tok, (u64)pos);
  }
  atomicAdd(slot_run_counter, written);
}

// verify.cu: re-check each planned slot's record (chain link, position, token, real-KV fingerprint).
//
// Semantics: backends/torch_ref/verify.py, byte for byte (ring rows in any order).
// Launch: a persistent 1-D grid (as many blocks as fill the GPU, or fewer for a small capacity) of
// KVC_THREADS threads, grid-striding over the entries [0, clamp(num_valid, 0, capacity)). The grid depends
// only on the capacity, so the launch is capturable and the plan can be refilled between replays.
// Memory-level parallelism: each thread takes KVC_EPT entries per round, a block-width apart (so every plan
// load is coalesced), and issues in order: every plan load of the round, then every record gather (the slot's
// and its predecessor's 32-byte records, two 16-byte loads each, KVC_VEC16), then every PARTIAL strip load,
// and only then hashes. So a thread has 4 x KVC_EPT record loads in flight, not 4.
// The record loads allocate in L1: a record's two 16-byte halves are one 32-byte sector, and the second load
// then merges into the first's L1 miss. Non-allocating loads sent each half to L2 separately, two requests
// per sector, and were slower at every shape measured (docs/tuning.md, "cuda backend: verify").
//
// Specializations (defines): KVC_THREADS, KVC_CHECK_TOKEN (0/1), KVC_NSRC (0..4), KVC_PARTIAL (1: each source
// folds one 16-byte chunk; 0: `chunks` chunks), KVC_VEC16 (1: slot stride % 16 == 0, 16-byte record loads),
// KVC_EPT (entries per thread per round; default 4 without sources, 2 with), KVC_ZERO (1: the
// ZERO_SLOT_IN_LIVE_RANGE extension reports the plan's kZeroSlotMark entries; 0: the default kernel).
#include "kvcanary_common.cuh"

#ifndef KVC_THREADS
#define KVC_THREADS 256
#endif
#ifndef KVC_CHECK_TOKEN
#define KVC_CHECK_TOKEN 0
#endif
#ifndef KVC_PARTIAL
#define KVC_PARTIAL 1
#endif
#ifndef KVC_VEC16
#define KVC_VEC16 1
#endif
#ifndef KVC_ZERO
#define KVC_ZERO 0
#endif
#ifndef KVC_EPT
#define KVC_EPT (KVC_NSRC == 0 ? 4 : 2)
#endif

using namespace kvc;

namespace {

struct Record {
  u64 tok, pos, chain, rkv;
};

__device__ __forceinline__ Record load_record(const unsigned char* p) {
  Record r;
#if KVC_VEC16
  const U64x2 a = ld_nc_v2(p);
  const U64x2 b = ld_nc_v2(p + 16);
  r.tok = a.x;
  r.pos = a.y;
  r.chain = b.x;
  r.rkv = b.y;
#else
  r.tok = ld_nc(p);
  r.pos = ld_nc(p + 8);
  r.chain = ld_nc(p + 16);
  r.rkv = ld_nc(p + 24);
#endif
  return r;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(KVC_THREADS)
    kvc_verify(const unsigned char* __restrict__ buf, long long num_slots, long long stride,
               const long long* __restrict__ slots, const long long* __restrict__ exp_tokens,
               const long long* __restrict__ exp_positions, const long long* __restrict__ prevs,
               const int* __restrict__ num_valid, const int* __restrict__ enable, long long capacity,
               long long* __restrict__ ring_rows, long long ring_capacity, int* __restrict__ write_index,
               unsigned long long* __restrict__ slot_run_counter,
               unsigned long long* __restrict__ kernel_run_counter, long long kind KVC_ALL_SOURCE_PARAMS) {
  KVC_DECLARE_SOURCES
  constexpr int U = KVC_EPT;
  const Ring ring{ring_rows, ring_capacity, write_index, kind};
  const i64 en = *enable;
  const i64 active = en != 0 ? iclamp((i64)*num_valid, 0, capacity) : 0;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    atomicAdd(kernel_run_counter, 1ULL);  // every launch counts, even a disabled one
    if (active > 0) atomicAdd(slot_run_counter, (u64)active);  // slot-0 entries included
  }
  const i64 step = (i64)gridDim.x * KVC_THREADS * U;
  for (i64 e0 = (i64)blockIdx.x * KVC_THREADS * U + threadIdx.x; e0 < active; e0 += step) {
    // 1. every plan load of the round (coalesced: entry u of the round is e0 + u * KVC_THREADS)
    i64 slot[U], exp_pos[U], prev[U], exp_tok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const i64 e = e0 + (i64)u * KVC_THREADS;
      slot[u] = kTokenToKvSlotPadding;  // past the end: skipped like a padding entry
      exp_pos[u] = 0;
      prev[u] = 0;
      exp_tok[u] = -1;
      if (e < active) {
        slot[u] = (i64)ld_nc(slots + e);
        exp_pos[u] = (i64)ld_nc(exp_positions + e);
        prev[u] = (i64)ld_nc(prevs + e);
#if KVC_CHECK_TOKEN
        exp_tok[u] = (i64)ld_nc(exp_tokens + e);
#endif
      }
    }
    // 2. every record gather of the round: the slot's and (for a chain link) its predecessor's
    Record cur[U], pre[U];
    bool live[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      live[u] = slot[u] > 0 && slot[u] < num_slots;  // 0: padding, never verified; outside: reported below
      const bool prev_oob = index_oob(prev[u], num_slots);
      const bool link = live[u] && prev[u] > 0 && !prev_oob;
      cur[u] = Record{0, 0, 0, 0};
      pre[u] = Record{0, 0, 0, 0};
      if (live[u]) cur[u] = load_record(buf + slot[u] * stride);
      if (link) pre[u] = load_record(buf + prev[u] * stride);
    }
    // 3. the strips (PARTIAL: one 16-byte load per source and entry, all in flight before any hashing)
#if KVC_NSRC > 0 && KVC_PARTIAL
    U64x2 strip[U][KVC_NSRC];
    bool strip_ok[U][KVC_NSRC];
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int i = 0; i < KVC_NSRC; ++i) {
        const i64 off = live[u] ? strip_offset(src[i], slot[u]) : (i64)-1;
        strip_ok[u][i] = off >= 0;
        strip[u][i] = U64x2{0, 0};
        if (strip_ok[u][i]) strip[u][i] = ld_nc_v2(src[i].base + off);
      }
    }
#endif
    // 4. hashing and checks
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const i64 s = slot[u];
      if (s == kTokenToKvSlotPadding) continue;  // the padding slot is never verified
#if KVC_ZERO
      if (s == kZeroSlotMark) {  // the plan's mark of a padding slot inside a live range: reported at slot 0
        ring.push(0, exp_pos[u], -1, exp_tok[u], 0, 0, kZeroSlotInLiveRange);
        continue;
      }
#endif
      if (!live[u]) {                            // INVALID_SLOT included
        ring.push(s, exp_pos[u], -1, exp_tok[u], 0, 0, kIndexOutOfRange);
        continue;
      }
      const i64 p = prev[u];
      const bool prev_oob = index_oob(p, num_slots);
      const bool prev_link = p > 0 && !prev_oob;
      const bool prev_anchor = p < 0 && !prev_oob;
      const bool prev_reach = p != 0 && !prev_oob;
      bool src_oob = false;
      u64 exp_rkv = 0;
#if KVC_NSRC > 0 && KVC_PARTIAL
#pragma unroll
      for (int i = 0; i < KVC_NSRC; ++i) {
        const u64 h = strip_ok[u][i] ? splitmix64(splitmix64(strip[u][i].x) ^ strip[u][i].y) : 0;
        src_oob |= !strip_ok[u][i];
        exp_rkv = splitmix64(exp_rkv ^ h);
      }
#elif KVC_NSRC > 0
      exp_rkv = fold_sources<KVC_NSRC, false>(src, s, src_oob);
#endif
      const Record& c = cur[u];
      u64 exp_chain = c.chain;
      if (prev_anchor) exp_chain = kAnchorHash;
      if (prev_link) exp_chain = mix3(pre[u].chain, pre[u].tok, pre[u].pos);

      i64 bits = 0;
      if (prev_reach && c.chain != exp_chain) bits |= kVerifyChainHashMismatch;
      if ((i64)c.pos != exp_pos[u]) bits |= kVerifyPositionMismatch;
      if (c.rkv != exp_rkv) bits |= kVerifyRealKvHashMismatch;
#if KVC_CHECK_TOKEN
      if (exp_tok[u] != -1 && (i64)c.tok != exp_tok[u]) bits |= kVerifyTokenMismatch;
#endif
      if (prev_oob || src_oob) bits |= kIndexOutOfRange;
      if (bits != 0) {
        ring.push(s, (i64)c.pos, (i64)c.tok, exp_tok[u], (i64)c.chain, prev_oob ? p : (i64)exp_chain, bits);
      }
    }
  }
}

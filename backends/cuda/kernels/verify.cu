// verify.cu: re-check each planned slot's record (chain link, position, token, real-KV fingerprint).
//
// Semantics: backends/torch_ref/verify.py, byte for byte (ring rows in any order).
// Launch: a persistent 1-D grid (as many blocks as fill the GPU, or fewer for a small capacity) of
// KVC_THREADS threads, grid-striding over the entries [0, clamp(num_valid, 0, capacity)). The grid depends
// only on the capacity, so the launch is capturable and the plan can be refilled between replays.
// Per entry: four coalesced 8-byte plan loads, then the two 32-byte records (the slot's and its
// predecessor's) gathered with two 16-byte non-allocating loads each (KVC_VEC16), issued back to back so
// both are in flight together; real-KV strips are gathered with 16-byte loads.
//
// Specializations (defines): KVC_THREADS, KVC_CHECK_TOKEN (0/1), KVC_NSRC (0..4), KVC_PARTIAL (1: each source
// folds one 16-byte chunk; 0: `chunks` chunks), KVC_VEC16 (1: slot stride % 16 == 0, 16-byte record loads).
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

using namespace kvc;

namespace {

struct Record {
  u64 tok, pos, chain, rkv;
};

__device__ __forceinline__ Record load_record(const unsigned char* p) {
  Record r;
#if KVC_VEC16
  const U64x2 a = ld_nc_na_v2(p);
  const U64x2 b = ld_nc_na_v2(p + 16);
  r.tok = a.x;
  r.pos = a.y;
  r.chain = b.x;
  r.rkv = b.y;
#else
  r.tok = ld_nc_na(p);
  r.pos = ld_nc_na(p + 8);
  r.chain = ld_nc_na(p + 16);
  r.rkv = ld_nc_na(p + 24);
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
  const Ring ring{ring_rows, ring_capacity, write_index, kind};
  const i64 en = *enable;
  const i64 active = en != 0 ? iclamp((i64)*num_valid, 0, capacity) : 0;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    atomicAdd(kernel_run_counter, 1ULL);  // every launch counts, even a disabled one
    if (active > 0) atomicAdd(slot_run_counter, (u64)active);  // slot-0 entries included
  }
  const i64 step = (i64)gridDim.x * KVC_THREADS;
  for (i64 e = (i64)blockIdx.x * KVC_THREADS + threadIdx.x; e < active; e += step) {
    const i64 slot = (i64)ld_nc(slots + e);
    const i64 exp_pos = (i64)ld_nc(exp_positions + e);
    const i64 prev = (i64)ld_nc(prevs + e);
#if KVC_CHECK_TOKEN
    const i64 exp_tok = (i64)ld_nc(exp_tokens + e);
#else
    const i64 exp_tok = -1;
#endif
    if (slot == kTokenToKvSlotPadding) continue;  // the padding slot is never verified
    if (slot < 0 || slot >= num_slots) {          // INVALID_SLOT included
      ring.push(slot, exp_pos, -1, exp_tok, 0, 0, kIndexOutOfRange);
      continue;
    }
    const bool prev_oob = prev == kInvalidSlot || prev >= num_slots;
    const bool prev_link = prev > 0 && !prev_oob;
    const bool prev_anchor = prev < 0 && !prev_oob;
    const bool prev_reach = prev != 0 && !prev_oob;
    // both gathers in flight together: the predecessor's address does not depend on the slot's record
    const Record cur = load_record(buf + slot * stride);
    const Record pre = load_record(buf + (prev_link ? prev : slot) * stride);
    bool src_oob = false;  // the strips' loads go out before the chain link waits for the records
    const u64 exp_rkv = fold_sources<KVC_NSRC, KVC_PARTIAL != 0>(src, slot, src_oob);
    u64 exp_chain = cur.chain;
    if (prev_anchor) exp_chain = kAnchorHash;
    if (prev_link) exp_chain = mix3(pre.chain, pre.tok, pre.pos);

    i64 bits = 0;
    if (prev_reach && cur.chain != exp_chain) bits |= kVerifyChainHashMismatch;
    if ((i64)cur.pos != exp_pos) bits |= kVerifyPositionMismatch;
    if (cur.rkv != exp_rkv) bits |= kVerifyRealKvHashMismatch;
#if KVC_CHECK_TOKEN
    if (exp_tok != -1 && (i64)cur.tok != exp_tok) bits |= kVerifyTokenMismatch;
#endif
    if (prev_oob || src_oob) bits |= kIndexOutOfRange;
    if (bits != 0) {
      ring.push(slot, (i64)cur.pos, (i64)cur.tok, exp_tok, (i64)cur.chain, prev_oob ? prev : (i64)exp_chain, bits);
    }
  }
}

// write.cu: stamp one record per written token, chaining each request from its seed slot.
//
// Semantics: backends/torch_ref/write.py, byte for byte (ring rows in any order; duplicate slots within a
// launch and seeds written by the same launch are unspecified).
// Launch: one block per request row of the write plan (grid = write_req_capacity, fixed, so capturable).
// Warp 0 of a block walks its request's tokens in tiles of 32: each tile's inputs are loaded (coalesced) one
// tile ahead, staged in shared memory, and the serial mix3 chain runs over the tile with every operand
// already in registers or shared memory (no load inside the dependency chain). Every lane keeps the running
// hash before its own token, then all 32 lanes do their token's checks and stores in parallel, off the chain.
// With real-KV sources (KVC_NSRC > 0) the block has 3 more warps that fold the strips and store field 3 of
// each record concurrently with the chain (the chain warp stores fields 0..2), so the fold never sits on the
// chain's critical path.
//
// Specializations: KVC_NSRC (0..4), KVC_PARTIAL (0/1), KVC_ASSERT (input assert on), KVC_VEC16 (stride % 16 == 0).
#include "kvcanary_common.cuh"

#ifndef KVC_ASSERT
#define KVC_ASSERT 0
#endif
#ifndef KVC_PARTIAL
#define KVC_PARTIAL 1
#endif
#ifndef KVC_VEC16
#define KVC_VEC16 1
#endif
#define KVC_WRITE_THREADS (KVC_NSRC > 0 ? 128 : 32)

using namespace kvc;

namespace {

struct alignas(16) TokPos {
  u64 tok, pos;
};

struct Inputs {
  i64 tok, pos, loc;
#if KVC_ASSERT
  i64 etok, epos;
#endif
};

__device__ __forceinline__ Inputs load_inputs(const i64* ids, const i64* poss, const i64* locs, const i64* etoks,
                                              const i64* eposs, i64 j, i64 count) {
  Inputs in;
  in.tok = 0;
  in.pos = 0;
  in.loc = -1;
#if KVC_ASSERT
  in.etok = 0;
  in.epos = 0;
#endif
  if (j < count) {
    in.tok = (i64)ld_nc(ids + j);
    in.pos = (i64)ld_nc(poss + j);
    in.loc = (i64)ld_nc(locs + j);
#if KVC_ASSERT
    in.etok = (i64)ld_nc(etoks + j);
    in.epos = (i64)ld_nc(eposs + j);
#endif
  }
  return in;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(KVC_WRITE_THREADS)
    kvc_write(unsigned char* __restrict__ buf, long long num_slots, long long stride,
              const long long* __restrict__ offsets, const long long* __restrict__ seeds,
              const int* __restrict__ num_valid_reqs, long long capacity, const long long* __restrict__ input_ids,
              const long long* __restrict__ positions, const long long* __restrict__ out_cache_loc, long long ntok,
              const long long* __restrict__ exp_tokens, const long long* __restrict__ exp_positions,
              const int* __restrict__ chain_position_assert, long long* __restrict__ ring_rows,
              long long ring_capacity, int* __restrict__ write_index,
              unsigned long long* __restrict__ slot_run_counter,
              unsigned long long* __restrict__ kernel_run_counter, long long kind KVC_ALL_SOURCE_PARAMS) {
  KVC_DECLARE_SOURCES
  const i64 r = blockIdx.x;
  if (r == 0 && threadIdx.x == 0) atomicAdd(kernel_run_counter, 1ULL);
  if (r >= capacity) return;  // capacity 0: the single block only counts the launch
  // Everything below depends on few device values; they are loaded in two rounds (a tiny request costs two
  // memory latencies, not five): first what depends only on r, then the total, the seed record, the inputs.
  const i64 nv = *num_valid_reqs;
  const i64 o0 = (i64)ld_nc(offsets + r);
  const i64 o1 = (i64)ld_nc(offsets + r + 1);
  const i64 seed = (i64)ld_nc(seeds + r);
  const int cpa = *chain_position_assert;
  const i64 nreq = iclamp(nv, 0, capacity);
  if (r >= nreq) return;
  const i64 start = iclamp(o0, 0, ntok);
  const i64 end = iclamp(o1, 0, ntok);
  const i64 count = end - start;
  if (count <= 0) return;

#if KVC_NSRC > 0
  if (threadIdx.x >= 32) {  // fold warps: field 3 of every stored record
    if ((i64)ld_nc(offsets + nreq) <= 0) return;  // the reference's early exit: nothing at all
    const i64* locs = out_cache_loc + start;
    for (i64 j = threadIdx.x - 32; j < count; j += KVC_WRITE_THREADS - 32) {
      const i64 loc = (i64)ld_nc(locs + j);
      if (loc < 0 || loc >= num_slots) continue;
      bool oob = false;
      const u64 rkv = fold_sources<KVC_NSRC, KVC_PARTIAL != 0>(src, loc, oob);
      st_u64(buf + loc * stride + 8 * kCanaryFieldRealKvHash, rkv);
    }
    return;
  }
#endif

  // ---- the chain warp ----
  __shared__ TokPos stage[2][32];
  const Ring ring{ring_rows, ring_capacity, write_index, kind};
  const int lane = threadIdx.x;
  const bool seed_oob = seed == kInvalidSlot || seed >= num_slots;
  const bool seed_ok = seed >= 0 && !seed_oob;
  const i64* ids = input_ids + start;
  const i64* poss = positions + start;
  const i64* locs = out_cache_loc + start;
  const i64* etoks = KVC_ASSERT ? exp_tokens + start : nullptr;
  const i64* eposs = KVC_ASSERT ? exp_positions + start : nullptr;
  // the second round: issued together
  const i64 total = (i64)ld_nc(offsets + nreq);
  u64 seed_tok = 0, seed_pos = 0, seed_hash = 0;
  if (seed_ok) {
    const unsigned char* p = buf + seed * stride;
    seed_tok = ld_cg(p);
    seed_pos = ld_cg(p + 8);
    seed_hash = ld_cg(p + 16);
  }
  Inputs next = load_inputs(ids, poss, locs, etoks, eposs, lane, count);
  if (total <= 0) return;  // the reference's early exit: nothing at all
  if (seed_oob && lane == 0) ring.push(seed, -1, -1, -1, 0, r, kIndexOutOfRange);
  u64 running = seed_ok ? mix3(seed_hash, seed_tok, seed_pos) : kAnchorHash;
  i64 carry_pos = seed_ok ? (i64)seed_pos : 0;  // position of the last advancing token (the seed's at first)
  const bool pos_assert = seed_ok && cpa != 0;

  u64 written = 0;
  int b = 0;
  for (i64 t0 = 0; t0 < count; t0 += 32, b ^= 1) {
    const Inputs in = next;
    next = load_inputs(ids, poss, locs, etoks, eposs, t0 + 32 + lane, count);  // one tile ahead

    const bool valid = t0 + lane < count;
    const bool adv = valid && in.loc >= 0;  // a skipped token does not advance the chain
    const bool loc_oob = adv && in.loc >= num_slots;
    const bool store = adv && !loc_oob;
    const u32 amask = __ballot_sync(kFullMask, adv);
    stage[b][lane] = TokPos{(u64)in.tok, (u64)in.pos};
    __syncwarp();

    u64 myh = running;  // the hash this lane's record stores (the running hash before its token)
    if (amask == kFullMask) {
#pragma unroll 8  // 8 steps per loop trip: the loop body stays small in the instruction cache
      for (int k = 0; k < 32; ++k) {
        const TokPos tp = stage[b][k];
        if (lane == k) myh = running;
        running = mix3(running, tp.tok, tp.pos);
      }
    } else {
      const int kend = 32 - __clz((int)amask);  // past the last advancing token nothing changes
      for (int k = 0; k < kend; ++k) {
        const TokPos tp = stage[b][k];
        if (lane == k) myh = running;
        const u64 h = mix3(running, tp.tok, tp.pos);
        if ((amask >> k) & 1u) running = h;
      }
    }

    // the position of the previous advancing token, for the chain-position assert
    const u32 below = amask & ((1u << lane) - 1u);
    const i64 ppos = __shfl_sync(kFullMask, in.pos, below ? 31 - __clz((int)below) : 0);
    const i64 prev_pos = below ? ppos : carry_pos;
    const i64 hi_pos = __shfl_sync(kFullMask, in.pos, amask ? 31 - __clz((int)amask) : 0);
    if (amask) carry_pos = hi_pos;
    written += (u64)__popc(__ballot_sync(kFullMask, store));

    if (loc_oob) ring.push(in.loc, in.pos, in.tok, in.tok, (i64)myh, in.pos, kIndexOutOfRange);
    if (store) {
#if KVC_ASSERT
      const i64 ibits = (in.tok != in.etok ? kWriteTokenMismatch : 0) | (in.pos != in.epos ? kWritePositionMismatch : 0);
      if (ibits) ring.push(in.loc, in.pos, in.tok, in.etok, (i64)myh, in.epos, ibits);
#endif
      const i64 want = wadd(prev_pos, 1);
      if (pos_assert && in.pos != want) ring.push(in.loc, in.pos, in.tok, in.tok, (i64)myh, want, kWritePositionMismatch);
#if KVC_NSRC > 0
      if (sources_oob<KVC_NSRC>(src, in.loc)) ring.push(in.loc, in.pos, in.tok, in.tok, (i64)myh, in.pos, kIndexOutOfRange);
#endif
      unsigned char* p = buf + in.loc * stride;
#if KVC_VEC16
      st_v2(p, (u64)in.tok, (u64)in.pos);
#if KVC_NSRC > 0
      st_u64(p + 16, myh);  // field 3 belongs to the fold warps
#else
      st_v2(p + 16, myh, 0ULL);
#endif
#else
      st_u64(p, (u64)in.tok);
      st_u64(p + 8, (u64)in.pos);
      st_u64(p + 16, myh);
#if KVC_NSRC == 0
      st_u64(p + 24, 0ULL);
#endif
#endif
    }
  }
  if (lane == 0 && written != 0) atomicAdd(slot_run_counter, written);
}

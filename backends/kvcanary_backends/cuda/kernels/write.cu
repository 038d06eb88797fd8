// write.cu: stamp one record per written token, chaining each request from its seed slot.
//
// Semantics: backends/torch_ref/write.py, byte for byte (ring rows in any order; duplicate slots within a
// launch and seeds written by the same launch are unspecified).
// Launch: grid (cdiv(write_req_capacity, KVC_WRITE_WARPS), 1 + fold rows), KVC_WRITE_WARPS warps per block
// (fixed by the capacity and the token count's shape, so capturable).
// - Blocks of row y = 0 are chain blocks: warp w of block x walks request r = x * KVC_WRITE_WARPS + w. Many tiny
//   requests share a block (few block launches) and the block adds its warps' stored-record counts into
//   slot_run_counter with one atomic. The request's offsets, seed and input tile are loaded in two rounds
//   (what depends only on r; then the total, the seed record and the first tile), both issued before any
//   early exit: 1024 one-token requests took five dependent rounds when the compiler sank loads into branches.
// - The chain: tokens in tiles of 32, lane k of the warp loading token k's inputs (coalesced, one tile ahead)
//   and staging its token and position in the warp's shared tile. Lane 0 alone walks the serial mix3 chain
//   over the tile (unrolled 32 steps for a full tile): its shared-memory reads do not depend on the chain, so
//   ptxas issues them ahead and nothing but mix3 sits on the critical path; it writes the hash before each
//   token back to the tile. Then all 32 lanes do their token's checks and stores in parallel. The shuffle-and-
//   select chain this replaces kept its shuffles on the critical path; the measured steps of both, beside the
//   registers-only floor, are in docs/tuning.md ("cuda backend: write").
// - With real-KV sources (KVC_NSRC > 0) rows y >= 1 are fold blocks: together they fold the strips of the
//   requests of block column x and store field 3 of each record (the chain stores fields 0..2), so the fold
//   never sits on the chain's critical path and a large fold (ALL, 2 KiB rows) is spread over many SMs.
//
// Specializations: KVC_NSRC (0..4), KVC_PARTIAL (0/1), KVC_ASSERT (input assert on), KVC_VEC16 (stride % 16 == 0),
// KVC_SLOT_CHECK (the WRITE_SLOT_MISMATCH extension: seven more parameters after chain_position_assert, the
// request rows and req_to_token; 0: the default kernel, its parameters and code unchanged), KVC_SLOT_LUT (with
// the check: translate req_to_token through the full->SWA LUT), KVC_OWNER_CHECK (the WRITE_SLOT_OWNER_MISMATCH
// extension: three more parameters after those, the request rows and the owner map; 0: absent).
//
// KVC_WRITE_VARIANT (bits; 0: the default, its code unchanged), candidates a benchmark times beside the
// default (benchmarks/bench_write_variants.py), every one storing the same bytes:
// - bit 1, the lean decode chain: a request whose first tile advances at most lane 0 (a decode step) skips the
//   tile: every lane already holds the hash before lane 0's token (the running hash) and the position before
//   it, so no shared-memory round trip, __syncwarp or shuffle sits between the seed's mix3 and the stores (and
//   the mix3 of lane 0's own token, needed only by a later tile, is not computed before them). The strips'
//   range check before a store (INDEX_OUT_OF_RANGE) is made before the chain, without a division where a
//   source's rows and page are below 2^31 (slot / page < rows is slot < rows * page).
// - bit 2, early strips (PARTIAL only): a fold worker issues each source's 16-byte load at the guessed slot as
//   soon as the first round returns it, before the offsets are decoded (the decode's branches and the strips'
//   divisions sat between the two rounds), and a power-of-two page (every paged source) locates its strip by a
//   shift and a mask instead of a division.
// - bit 4, the one-token fold (with bit 2): where a fold column's offsets are exactly one token a request
//   (r0 .. r0 + 4, inside the token count and the capacity: a test the whole block takes alike), each of its
//   first KVC_WRITE_WARPS workers folds the slot the first round loaded straight away, its strips issued with
//   the total, none of the general decoding of the offsets (about 110 instructions) before them.
#include "kvcanary_common.cuh"

#ifndef KVC_WRITE_VARIANT
#define KVC_WRITE_VARIANT 0
#endif
#if KVC_WRITE_VARIANT < 0 || KVC_WRITE_VARIANT > 7 || KVC_WRITE_VARIANT == 4 || KVC_WRITE_VARIANT == 5
#error "KVC_WRITE_VARIANT: bit 1 the lean decode chain, bit 2 early strips, bit 4 the one-token fold (with bit 2)"
#endif
#define KVC_LEAN_CHAIN ((KVC_WRITE_VARIANT & 1) != 0)
#define KVC_EARLY_STRIPS ((KVC_WRITE_VARIANT & 2) != 0 && KVC_PARTIAL != 0 && KVC_NSRC > 0)
#define KVC_ONE_TOKEN_FOLD ((KVC_WRITE_VARIANT & 4) != 0 && KVC_EARLY_STRIPS && KVC_WRITE_WARPS == 4)

#ifndef KVC_ASSERT
#define KVC_ASSERT 0
#endif
#ifndef KVC_PARTIAL
#define KVC_PARTIAL 1
#endif
#ifndef KVC_VEC16
#define KVC_VEC16 1
#endif
#ifndef KVC_SLOT_CHECK
#define KVC_SLOT_CHECK 0
#endif
#ifndef KVC_SLOT_LUT
#define KVC_SLOT_LUT 0
#endif
#if KVC_SLOT_CHECK
#define KVC_SLOT_PARAMS                                                                                        \
  , const long long *__restrict__ slot_rpi, long long slot_rpi_len, const int *__restrict__ slot_r2t,          \
      long long slot_rtt_rows, long long slot_rtt_cols, const long long *__restrict__ slot_lut, long long slot_lut_len
#define KVC_SLOT_ARGS , slot_rpi, slot_rpi_len, slot_r2t, slot_rtt_rows, slot_rtt_cols, slot_lut, slot_lut_len
#else
#define KVC_SLOT_PARAMS
#define KVC_SLOT_ARGS
#endif
#ifndef KVC_OWNER_CHECK
#define KVC_OWNER_CHECK 0
#endif
#if KVC_OWNER_CHECK
#define KVC_OWNER_PARAMS                                                                                       \
  , const long long *__restrict__ owner_rpi, long long owner_rpi_len, const long long *__restrict__ owner_map
#define KVC_OWNER_ARGS , owner_rpi, owner_rpi_len, owner_map
#else
#define KVC_OWNER_PARAMS
#define KVC_OWNER_ARGS
#endif
#ifndef KVC_WRITE_WARPS
#define KVC_WRITE_WARPS 4  // one chain warp per scheduler (write.py says why)
#endif
#define KVC_WRITE_THREADS (KVC_WRITE_WARPS * 32)

using namespace kvc;

namespace {

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

struct WriteArgs {
  unsigned char* buf;
  i64 num_slots;
  i64 stride;
  const i64* offsets;
  const i64* seeds;
  const int* num_valid_reqs;
  i64 capacity;
  const i64* input_ids;
  const i64* positions;
  const i64* out_cache_loc;
  i64 ntok;
  const i64* exp_tokens;
  const i64* exp_positions;
  const int* chain_position_assert;
#if KVC_SLOT_CHECK
  const i64* rpi;
  i64 rpi_len;
  const int* r2t;
  i64 rtt_rows;
  i64 rtt_cols;
  const i64* lut;
  i64 lut_len;
#endif
#if KVC_OWNER_CHECK
  const i64* owner_rpi;
  i64 owner_rpi_len;
  const i64* owner;  // one entry per canary slot: the req_to_token row holding it, -1 free, below -1 read-only
#endif
};

#if KVC_SLOT_CHECK
// req_to_token[rp, pos] as a slot, by the plan's rules: INVALID_SLOT outside the table, through the LUT if any.
__device__ __forceinline__ i64 wanted_slot(const WriteArgs& a, i64 rp, i64 pos) {
  const bool ok = rp >= 0 && rp < a.rtt_rows && pos >= 0 && pos < a.rtt_cols;
  i64 raw = ok ? (i64)a.r2t[rp * a.rtt_cols + pos] : kInvalidSlot;
#if KVC_SLOT_LUT
  if (raw >= 0) raw = raw < a.lut_len ? a.lut[raw] : kInvalidSlot;
#endif
  return raw;
}
#endif

#if KVC_WRITE_VARIANT != 0 && KVC_NSRC > 0
// strip_offset(s, slot) < 0 for slot >= 0, without its division where rows and page are below 2^31 (their
// product is then exact): floor(slot / page) < rows exactly when slot < rows * page.
__device__ __forceinline__ bool strip_oob_fast(const Source& s, i64 slot) {
  if ((u64)s.rows < (1ULL << 31) && (u64)s.page - 1ULL < (1ULL << 31) - 1ULL) return slot >= s.rows * s.page;
  return strip_offset(s, slot) < 0;
}

template <int kNsrc>
__device__ __forceinline__ bool sources_oob_fast(const Source* src, i64 slot) {
  bool oob = false;
#pragma unroll
  for (int i = 0; i < kNsrc; ++i) oob |= strip_oob_fast(src[i], slot);
  return oob;
}
#endif

#if KVC_EARLY_STRIPS
// Whether a page is a power of two below 2^31: its strips are then located by a shift and a mask.
__device__ __forceinline__ bool page_pow2(i64 page) { return page >= 1 && page < (1LL << 31) && (page & (page - 1)) == 0; }

// strip_offset(s, slot) for slot >= 0 and a page_pow2 page, without branches: the same quotient and remainder
// as its division.
__device__ __forceinline__ i64 strip_offset_pow2(const Source& s, i64 slot) {
  const i64 row = slot >> __popc((u32)(s.page - 1));
  return row < s.rows ? row * s.row_stride + (slot & (s.page - 1)) * s.nbpt : (i64)-1;
}

#ifndef KVC_HOST_EMULATION
// ld_nc_v2 issued where it stands (volatile, like ld_now): not sunk into the branch that first uses it.
__device__ __forceinline__ U64x2 ld_now_v2(const void* p) {
  U64x2 v;
  asm volatile("ld.global.nc.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p) : "memory");
  return v;
}
#else
__device__ __forceinline__ U64x2 ld_now_v2(const void* p) { return ld_nc_v2(p); }
#endif

// PARTIAL's 16 bytes of every source at a slot; ok[i]: the strip lies inside source i (else it folds as 0).
struct Strips {
  U64x2 v[KVC_NSRC];
  bool ok[KVC_NSRC];
};

// The strips of `slot` (none where !live), every load issued before any is used. Where every page is a power
// of two (the test is the same for every thread) the offsets are straight-line code, no branch between loads.
__device__ __forceinline__ Strips load_strips(const Source* src, i64 slot, bool live) {
  bool pow2 = true;
#pragma unroll
  for (int i = 0; i < KVC_NSRC; ++i) pow2 &= page_pow2(src[i].page);
  i64 off[KVC_NSRC];
  if (pow2) {
#pragma unroll
    for (int i = 0; i < KVC_NSRC; ++i) off[i] = strip_offset_pow2(src[i], slot);
  } else {
#pragma unroll
    for (int i = 0; i < KVC_NSRC; ++i) off[i] = live ? strip_offset(src[i], slot) : (i64)-1;
  }
  Strips s;
#pragma unroll
  for (int i = 0; i < KVC_NSRC; ++i) {
    s.ok[i] = live && off[i] >= 0;
    s.v[i] = U64x2{0, 0};
    if (s.ok[i]) s.v[i] = ld_now_v2(src[i].base + off[i]);
  }
  return s;
}

// fold_sources<KVC_NSRC, true> of the loaded strips: the same hash, byte for byte.
__device__ __forceinline__ u64 fold_strips(const Strips& s) {
  u64 acc = 0;
#pragma unroll
  for (int i = 0; i < KVC_NSRC; ++i) {
    const u64 h = s.ok[i] ? splitmix64(splitmix64(s.v[i].x) ^ s.v[i].y) : 0;
    acc = splitmix64(acc ^ h);
  }
  return acc;
}
#endif

// One warp's tile in shared memory: the tokens and positions lane 0's chain reads, the hashes it hands back.
struct Tile {
  u64 tok[32];
  u64 pos[32];
  u64 hash[32];
};

// The chain of request r by one warp; returns the number of records it stored (every lane returns it).
// `running` is meaningful in lane 0 only (the other lanes never compute it).
__device__ __forceinline__ u64 chain_request(const WriteArgs& a, const Ring& ring, const Source* src, Tile& tile,
                                             i64 r, int lane) {
  (void)src;
  if (r >= a.capacity) return 0;
  // Every load of both rounds is issued before the first early exit. Round 1, what depends only on r (ld_now:
  // the compiler would sink each load into the branch that first needs it, one round trip each):
  const i64 nv = ld_now_s32(a.num_valid_reqs);
  const int cpa = ld_now_s32(a.chain_position_assert);
  const i64 o0 = (i64)ld_now(a.offsets + r);
  const i64 o1 = (i64)ld_now(a.offsets + r + 1);  // r < capacity: offsets holds capacity + 1
  const i64 seed = (i64)ld_now(a.seeds + r);
#if KVC_SLOT_CHECK
  const i64 slot_rp = r < a.rpi_len ? (i64)ld_now(a.rpi + r) : 0;  // past req_pool_indices: padding, unchecked
#endif
#if KVC_OWNER_CHECK
  const i64 owner_rp = r < a.owner_rpi_len ? (i64)ld_now(a.owner_rpi + r) : 0;  // the writer (0: unchecked)
#endif
  const i64 nreq = iclamp(nv, 0, a.capacity);
  const i64 start = iclamp(o0, 0, a.ntok);
  const i64 end = iclamp(o1, 0, a.ntok);
  const i64 count = end - start;

  const i64 num_slots = a.num_slots;
  const bool seed_oob = index_oob(seed, num_slots);
  const bool seed_ok = seed >= 0 && !seed_oob;
  const i64* ids = a.input_ids + start;
  const i64* poss = a.positions + start;
  const i64* locs = a.out_cache_loc + start;
  const i64* etoks = KVC_ASSERT ? a.exp_tokens + start : nullptr;
  const i64* eposs = KVC_ASSERT ? a.exp_positions + start : nullptr;
  // Round 2, issued together: the total (the reference's early exit), the seed record, the first tile.
  const i64 total = (i64)ld_now(a.offsets + nreq);
  u64 seed_tok = 0, seed_pos = 0, seed_hash = 0;
  if (seed_ok) {
    const unsigned char* p = a.buf + seed * a.stride;
    seed_tok = ld_cg(p);
    seed_pos = ld_cg(p + 8);
    seed_hash = ld_cg(p + 16);
  }
  Inputs next = load_inputs(ids, poss, locs, etoks, eposs, lane, count);
  if (r >= nreq || count <= 0) return 0;
  if (total <= 0) return 0;  // the reference's early exit: nothing at all
  if (seed_oob && lane == 0) ring.push(seed, -1, -1, -1, 0, r, kIndexOutOfRange);
  u64 running = seed_ok ? mix3(seed_hash, seed_tok, seed_pos) : kAnchorHash;
  i64 carry_pos = seed_ok ? (i64)seed_pos : 0;  // position of the last advancing token (the seed's at first)
  const bool pos_assert = seed_ok && cpa != 0;

  u64 written = 0;
  for (i64 t0 = 0; t0 < count; t0 += 32) {
    const Inputs in = next;
    next = load_inputs(ids, poss, locs, etoks, eposs, t0 + 32 + lane, count);  // one tile ahead

    const bool valid = t0 + lane < count;
    const bool adv = valid && in.loc >= 0;  // a skipped token does not advance the chain
    const bool loc_oob = adv && in.loc >= num_slots;
    const bool store = adv && !loc_oob;
    const u32 amask = __ballot_sync(kFullMask, adv);
    const u64 mytok = (u64)in.tok;
    const u64 mypos = (u64)in.pos;
#if KVC_LEAN_CHAIN && KVC_NSRC > 0
    const bool strips_oob = store && sources_oob_fast<KVC_NSRC>(src, in.loc);  // before the chain, off its path
#endif
#if KVC_LEAN_CHAIN
    u64 myh;
    i64 prev_pos;
    if (t0 == 0 && amask <= 1u) {
      // at most lane 0 advances in the first tile (a decode step): every lane holds the hash before lane 0's
      // token and the position before it; a later tile (warp-uniform test) continues from lane 0's token
      myh = running;
      prev_pos = carry_pos;
      if (amask != 0 && count > 32) {
        carry_pos = __shfl_sync(kFullMask, in.pos, 0);
        running = mix3(running, mytok, mypos);  // lane 0's is the one the tiles use
      }
    } else {
#endif

    // the chain, by lane 0 alone over the tile staged in shared memory: its broadcast reads do not depend on
    // the chain (ptxas issues them ahead), and the hash before each token goes back through shared memory
    tile.tok[lane] = mytok;
    tile.pos[lane] = mypos;
    __syncwarp();
    if (lane == 0) {
      if (amask == kFullMask) {
#pragma unroll
        for (int k = 0; k < 32; ++k) {
          tile.hash[k] = running;
          running = mix3(running, tile.tok[k], tile.pos[k]);
        }
      } else {
        const int kend = 32 - __clz((int)amask);  // past the last advancing token nothing changes
        for (int k = 0; k < kend; ++k) {
          tile.hash[k] = running;
          const u64 h = mix3(running, tile.tok[k], tile.pos[k]);
          if ((amask >> k) & 1u) running = h;
        }
        for (int k = kend; k < 32; ++k) tile.hash[k] = running;  // lanes that store nothing
      }
    }
    __syncwarp();
#if KVC_LEAN_CHAIN
    myh = tile.hash[lane];
#else
    const u64 myh = tile.hash[lane];  // the hash this lane's record stores (the running hash before its token)
#endif

    // the position of the previous advancing token, for the chain-position assert
    const u32 below = amask & ((1u << lane) - 1u);
    const i64 ppos = __shfl_sync(kFullMask, in.pos, below ? 31 - __clz((int)below) : 0);
#if KVC_LEAN_CHAIN
    prev_pos = below ? ppos : carry_pos;
#else
    const i64 prev_pos = below ? ppos : carry_pos;
#endif
    const i64 hi_pos = __shfl_sync(kFullMask, in.pos, amask ? 31 - __clz((int)amask) : 0);
    if (amask) carry_pos = hi_pos;
#if KVC_LEAN_CHAIN
    }
#endif
    written += (u64)__popc(__ballot_sync(kFullMask, store));

    if (loc_oob) ring.push(in.loc, in.pos, in.tok, in.tok, (i64)myh, in.pos, kIndexOutOfRange);
    if (store) {
#if KVC_ASSERT
      const i64 ibits = (in.tok != in.etok ? kWriteTokenMismatch : 0) | (in.pos != in.epos ? kWritePositionMismatch : 0);
      if (ibits) ring.push(in.loc, in.pos, in.tok, in.etok, (i64)myh, in.epos, ibits);
#endif
      const i64 want = wadd(prev_pos, 1);
      if (pos_assert && in.pos != want) ring.push(in.loc, in.pos, in.tok, in.tok, (i64)myh, want, kWritePositionMismatch);
#if KVC_NSRC > 0 && KVC_LEAN_CHAIN
      if (strips_oob) ring.push(in.loc, in.pos, in.tok, in.tok, (i64)myh, in.pos, kIndexOutOfRange);
#elif KVC_NSRC > 0
      if (sources_oob<KVC_NSRC>(src, in.loc)) ring.push(in.loc, in.pos, in.tok, in.tok, (i64)myh, in.pos, kIndexOutOfRange);
#endif
      unsigned char* p = a.buf + in.loc * a.stride;
#if KVC_VEC16
      st_v2(p, (u64)in.tok, (u64)in.pos);
#if KVC_NSRC > 0
      st_u64(p + 16, myh);  // field 3 belongs to the fold blocks
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
#if KVC_SLOT_CHECK
    if (adv && slot_rp != 0) {
      const i64 want = wanted_slot(a, slot_rp, in.pos);
      if (in.loc != want) ring.push(in.loc, in.pos, in.tok, in.tok, (i64)myh, want, kWriteSlotMismatch);
    }
#endif
#if KVC_OWNER_CHECK
    if (store && owner_rp != 0) {
      const i64 holder = (i64)ld_nc(a.owner + in.loc);  // read-only in this launch
      if (holder != owner_rp) ring.push(in.loc, in.pos, in.tok, owner_rp, (i64)myh, holder, kWriteSlotOwnerMismatch);
    }
#endif
  }
  return written;
}

#if KVC_NSRC > 0
// Flat token j of a fold column -> its index into the token arrays (request k's tokens follow those of 0..k-1).
__device__ __forceinline__ i64 flat_at(const i64 (&start)[KVC_WRITE_WARPS], const i64 (&first)[KVC_WRITE_WARPS + 1],
                                       i64 j) {
  i64 at = start[0] + j;
#pragma unroll
  for (int k = 1; k < KVC_WRITE_WARPS; ++k)
    if (j >= first[k]) at = start[k] + (j - first[k]);
  return at;
}

// Fold block (x, y >= 1): with the other fold blocks of column x, fold the strips of every stored token of the
// requests of chain block x and store field 3 of their records. The column's tokens are taken as one flat
// range (request k's tokens after those of requests 0..k-1), so every load round is issued for all of its
// requests at once: a loop over the requests, one after another, made 1024 one-token requests a chain of 14
// dependent rounds. Two rounds remain where the write is decode-shaped: the counter, the column's offsets and
// the slot at the flat index one token per request gives this thread (request r0 + k's token at r0 + k); then
// the total and this thread's first strips, issued together (the strips are read before the total's early exit:
// reading them is harmless, only the store waits for the test). Where the offsets say the guessed index is not
// this thread's token, the slot is reloaded from its real index first (laid out as if every request of the
// column were live: the live ones come first, so their flat indices are the same, and the clamped offsets keep
// the load inside the token arrays): one round more, as before the guess.
__device__ __forceinline__ void fold_requests(const WriteArgs& a, const Source* src) {
  const i64 r0 = (i64)blockIdx.x * KVC_WRITE_WARPS;
  const i64 worker = (i64)(blockIdx.y - 1) * KVC_WRITE_THREADS + threadIdx.x;
  const i64 workers = (i64)(gridDim.y - 1) * KVC_WRITE_THREADS;
  const i64 guess = r0 + worker;  // a decode-shaped write's flat index of this worker's token
  i64 off[KVC_WRITE_WARPS + 1];
  i64 nv, loc_guess;
#if KVC_WRITE_WARPS == 4 && !defined(KVC_HOST_EMULATION)
  // The first round in one statement: separate loads were split by the compiler around the code that uses the
  // first of them, and the rest issued only once those had arrived (one more round trip). The guessed slot is
  // read unconditionally (from the offsets, any valid address, when there is no such token) and used only below.
  {
    const i64* gp = guess < a.ntok ? a.out_cache_loc + guess : a.offsets;
    int nv32;
    asm volatile(
        "ld.global.nc.u64 %0, [%7];\n\t"
        "ld.global.nc.u64 %1, [%8];\n\t"
        "ld.global.nc.u64 %2, [%9];\n\t"
        "ld.global.nc.u64 %3, [%10];\n\t"
        "ld.global.nc.u64 %4, [%11];\n\t"
        "ld.global.nc.u64 %5, [%12];\n\t"
        "ld.volatile.global.s32 %6, [%13];"
        : "=l"(off[0]), "=l"(off[1]), "=l"(off[2]), "=l"(off[3]), "=l"(off[4]), "=l"(loc_guess), "=r"(nv32)
        : "l"(a.offsets + imin(r0, a.capacity)), "l"(a.offsets + imin(r0 + 1, a.capacity)),
          "l"(a.offsets + imin(r0 + 2, a.capacity)), "l"(a.offsets + imin(r0 + 3, a.capacity)),
          "l"(a.offsets + imin(r0 + 4, a.capacity)), "l"(gp), "l"(a.num_valid_reqs)
        : "memory");
    nv = nv32;
    if (!(guess < a.ntok)) loc_guess = -1;
  }
#else
  nv = ld_now_s32(a.num_valid_reqs);
  loc_guess = guess < a.ntok ? (i64)ld_now(a.out_cache_loc + guess) : -1;
#pragma unroll
  for (int k = 0; k <= KVC_WRITE_WARPS; ++k) off[k] = (i64)ld_now(a.offsets + imin(r0 + k, a.capacity));
#endif
#if KVC_ONE_TOKEN_FOLD
  // the column's requests hold one token each, at flat indices r0 .. r0 + 3 (the same test in every thread):
  // worker w < 4 folds request r0 + w's token, at the slot loaded as its guess
  if (off[0] == r0 && off[1] == r0 + 1 && off[2] == r0 + 2 && off[3] == r0 + 3 && off[4] == r0 + 4 &&
      r0 + 4 <= a.ntok && r0 + 4 <= a.capacity) {
    const i64 nreq1 = iclamp(nv, 0, a.capacity);
    const bool mine1 = worker < KVC_WRITE_WARPS && r0 + worker < nreq1 && loc_guess >= 0 && loc_guess < a.num_slots;
    const Strips strips = load_strips(src, loc_guess, mine1);
    const i64 total1 = (i64)ld_now(a.offsets + nreq1);  // the reference's early exit
    const u64 rkv1 = fold_strips(strips);
    if (mine1 && total1 > 0) st_u64(a.buf + loc_guess * a.stride + 8 * kCanaryFieldRealKvHash, rkv1);
    return;
  }
#endif
#if KVC_EARLY_STRIPS
  // a decode write's token of request r0 + worker (only the first KVC_WRITE_WARPS workers' guesses can be
  // right with one token a request: no strips loaded for the others)
  const bool early_live = worker < KVC_WRITE_WARPS && loc_guess >= 0 && loc_guess < a.num_slots;
  const Strips early = load_strips(src, loc_guess, early_live);
#endif
  i64 start[KVC_WRITE_WARPS], first[KVC_WRITE_WARPS + 1];  // request k: tokens [start, +count) at flat first[k]
  first[0] = 0;
  // without branches up to the reload below: a load the compiler finds used only past a branch may be moved
  // there, after the code that waits for the offsets
#pragma unroll
  for (int k = 0; k < KVC_WRITE_WARPS; ++k) {
    start[k] = iclamp(off[k], 0, a.ntok);
    const i64 count = imax(iclamp(off[k + 1], 0, a.ntok) - start[k], 0);
    first[k + 1] = first[k] + (count & -(i64)(r0 + k < a.capacity));  // 0 past the capacity
  }
  // the guessed slot only where the offsets say the guessed index is this worker's token
  const i64 at = flat_at(start, first, worker);
  const bool mine = worker < first[KVC_WRITE_WARPS];
  i64 loc0 = mine ? loc_guess : -1;
  if (mine && at != guess) loc0 = (i64)ld_now(a.out_cache_loc + at);
  const i64 nreq = iclamp(nv, 0, a.capacity);
#if KVC_EARLY_STRIPS
  // no early exit while the early strips are in flight (ptxas sinks a load past an exit its value is used
  // after): a column past nreq has no live token below, and its fold of the early strips is discarded
  const u64 early_rkv = fold_strips(early);
#else
  if (r0 >= nreq) return;
#endif
  // the total (the reference's early exit) loaded with this worker's first strips, not before them
  const i64 total = (i64)ld_now(a.offsets + nreq);
  i64 live = 0;  // the column's live tokens: those of requests r0 + k < nreq
#pragma unroll
  for (int k = 0; k < KVC_WRITE_WARPS; ++k)
    if (r0 + k < nreq) live = first[k + 1];
  const bool first_ok = worker < live && loc0 >= 0 && loc0 < a.num_slots;
  u64 rkv0 = 0;
  if (first_ok) {
#if KVC_EARLY_STRIPS
    rkv0 = early_live && loc0 == loc_guess ? early_rkv : fold_strips(load_strips(src, loc0, true));
#else
    bool oob = false;
    rkv0 = fold_sources<KVC_NSRC, KVC_PARTIAL != 0>(src, loc0, oob);
#endif
  }
#ifndef KVC_HOST_EMULATION
  asm volatile("" ::"l"(rkv0));  // the strips' loads stay above the total's test (not sunk into its branch)
#endif
  if (total <= 0) return;
  for (i64 j = worker; j < live; j += workers) {
    const i64 loc = j == worker ? loc0 : (i64)ld_nc(a.out_cache_loc + flat_at(start, first, j));
    if (loc < 0 || loc >= a.num_slots) continue;
#if KVC_EARLY_STRIPS
    const u64 rkv = j == worker ? rkv0 : fold_strips(load_strips(src, loc, true));
#else
    bool oob = false;
    const u64 rkv = j == worker ? rkv0 : fold_sources<KVC_NSRC, KVC_PARTIAL != 0>(src, loc, oob);
#endif
    st_u64(a.buf + loc * a.stride + 8 * kCanaryFieldRealKvHash, rkv);
  }
}
#endif

}  // namespace

extern "C" __global__ void __launch_bounds__(KVC_WRITE_THREADS)
    kvc_write(unsigned char* __restrict__ buf, long long num_slots, long long stride,
              const long long* __restrict__ offsets, const long long* __restrict__ seeds,
              const int* __restrict__ num_valid_reqs, long long capacity, const long long* __restrict__ input_ids,
              const long long* __restrict__ positions, const long long* __restrict__ out_cache_loc, long long ntok,
              const long long* __restrict__ exp_tokens, const long long* __restrict__ exp_positions,
              const int* __restrict__ chain_position_assert KVC_SLOT_PARAMS KVC_OWNER_PARAMS,
              long long* __restrict__ ring_rows,
              long long ring_capacity, int* __restrict__ write_index,
              unsigned long long* __restrict__ slot_run_counter,
              unsigned long long* __restrict__ kernel_run_counter, long long kind KVC_ALL_SOURCE_PARAMS) {
  KVC_DECLARE_SOURCES
  __shared__ u64 warp_written[KVC_WRITE_WARPS];
  __shared__ Tile tiles[KVC_WRITE_WARPS];
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) atomicAdd(kernel_run_counter, 1ULL);
  const WriteArgs a{buf, num_slots, stride, offsets, seeds, num_valid_reqs, capacity, input_ids, positions,
                    out_cache_loc, ntok, exp_tokens, exp_positions, chain_position_assert KVC_SLOT_ARGS KVC_OWNER_ARGS};
  if (blockIdx.y != 0) {
#if KVC_NSRC > 0
    fold_requests(a, src);
#endif
    return;
  }
  const Ring ring{ring_rows, ring_capacity, write_index, kind};
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const u64 written = chain_request(a, ring, src, tiles[warp], (i64)blockIdx.x * KVC_WRITE_WARPS + warp, lane);
  if (lane == 0) warp_written[warp] = written;
  __syncthreads();
  if (threadIdx.x == 0) {
    u64 sum = 0;
#pragma unroll
    for (int w = 0; w < KVC_WRITE_WARPS; ++w) sum += warp_written[w];
    if (sum != 0) atomicAdd(slot_run_counter, sum);  // one atomic per block, not per request
  }
}

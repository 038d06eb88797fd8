// kvcanary_common.cuh: what every kvcanary CUDA kernel shares: integer types, the format's constants
// (mirroring kvcanary/consts.py; tests/backends/cuda/test_compile.py pins every one), splitmix64 and the
// chain link, explicit 16-byte loads and stores, the real-KV fold and the fill-once violation ring.
//
// Compiled by NVRTC at run time and by nvcc in CI: it includes no header at all (NVRTC has no host
// headers), and uses only compiler built-ins (atomics, warp intrinsics) and inline PTX.
#pragma once

namespace kvc {

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;

// ---- the format (kvcanary/consts.py) ----------------------------------------------------------------------
constexpr u64 kCanaryChainAnchor = 0xC0FFEE1234567890ULL;
constexpr u64 kAnchorHash = 0xDE7FAE23A9A1B716ULL;  // splitmix64(kCanaryChainAnchor): a chain head's prev_hash
constexpr i64 kReqPoolIdxPadding = 0;
constexpr i64 kTokenToKvSlotPadding = 0;
constexpr int kCanaryFieldsPerSlot = 4;
constexpr int kCanaryFieldToken = 0;
constexpr int kCanaryFieldPosition = 1;
constexpr int kCanaryFieldPrevHash = 2;
constexpr int kCanaryFieldRealKvHash = 3;
constexpr int kCanarySlotBytes = 32;
constexpr int kViolationFields = 8;
constexpr int kMaxRealKvSources = 4;
constexpr int kRealKvChunkBytes = 16;
constexpr int kPlanBsBlockSize = 4096;
constexpr i64 kInvalidSlot = -9223372036854775807LL - 1;  // INVALID_SLOT = -(2**63)

// FailReason bits
constexpr i64 kVerifyChainHashMismatch = 1;
constexpr i64 kVerifyPositionMismatch = 2;
constexpr i64 kVerifyRealKvHashMismatch = 4;
constexpr i64 kWriteTokenMismatch = 8;
constexpr i64 kWritePositionMismatch = 16;
constexpr i64 kVerifyTokenMismatch = 32;
// The extensions' constants, only in their specializations (-D on the command line): the default kernels'
// PTX stays byte for byte what it was before the extensions existed (no extra unused globals).
#if defined(KVC_MARK_ZERO) || defined(KVC_ZERO) || defined(KVC_SLOT_CHECK)
constexpr i64 kZeroSlotMark = -9223372036854775807LL;  // ZERO_SLOT_MARK = INVALID_SLOT + 1
constexpr i64 kZeroSlotInLiveRange = 64;
constexpr i64 kWriteSlotMismatch = 128;
#endif
#if defined(KVC_OWNER_CHECK)
constexpr i64 kWriteSlotOwnerMismatch = 512;
#endif
constexpr i64 kIndexOutOfRange = 256;

constexpr u32 kFullMask = 0xffffffffu;

// ---- hashing (uint64 modulo 2^64) --------------------------------------------------------------------------
__device__ __forceinline__ u64 splitmix64(u64 x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

__device__ __forceinline__ u64 mix3(u64 a, u64 b, u64 c) {
  return splitmix64(splitmix64(splitmix64(a) ^ b) ^ c);
}

// Signed helpers with two's-complement wrap-around (torch's int64 arithmetic), free of C++ overflow UB.
__device__ __forceinline__ i64 wadd(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
__device__ __forceinline__ i64 wsub(i64 a, i64 b) { return (i64)((u64)a - (u64)b); }
__device__ __forceinline__ i64 imin(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 imax(i64 a, i64 b) { return a > b ? a : b; }
__device__ __forceinline__ i64 iclamp(i64 v, i64 lo, i64 hi) { return imin(imax(v, lo), hi); }

// Saturating addition of non-negative counts: min(a + b, INT64_MAX) for a, b in [0, INT64_MAX] (the sum fits
// in a u64, so nothing wraps). Plan offsets and totals are exact prefix sums saturated this way.
constexpr u64 kI64Max = 0x7fffffffffffffffULL;
__device__ __forceinline__ u64 sat_add(u64 a, u64 b) {
  const u64 s = a + b;
  return s < kI64Max ? s : kI64Max;
}

// A predecessor or seed slot the reference reports as out of range: INVALID_SLOT or past the buffer. Negative
// slots other than INVALID_SLOT are anchors (a chain head), not out of range.
__device__ __forceinline__ bool index_oob(i64 slot, i64 num_slots) {
  return slot == kInvalidSlot || slot >= num_slots;
}

// ---- explicit global-memory accesses -----------------------------------------------------------------------
struct alignas(16) U64x2 {
  u64 x, y;
};

#ifndef KVC_HOST_EMULATION
// Read-only data of this launch (plan arrays, records in verify, real-KV bytes): non-coherent path.
__device__ __forceinline__ u64 ld_nc(const void* p) {
  u64 v;
  asm("ld.global.nc.u64 %0, [%1];" : "=l"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ U64x2 ld_nc_v2(const void* p) {
  U64x2 v;
  asm("ld.global.nc.v2.u64 {%0, %1}, [%2];" : "=l"(v.x), "=l"(v.y) : "l"(p));
  return v;
}

// Read-only loads issued where they stand: volatile asm, so the compiler cannot sink one past an early exit
// into the branch that first needs it (write's per-request inputs: each sunk load was one more dependent round
// trip before the request's work, five in all instead of two). ptxas still sank a 32-bit ld.global.nc whose
// value is used only after the exits, so the int32 flags take a volatile (strong) load, which it keeps in place.
__device__ __forceinline__ u64 ld_now(const void* p) {
  u64 v;
  asm volatile("ld.global.nc.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ int ld_now_s32(const int* p) {
  int v;
  asm volatile("ld.volatile.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Coherent loads: data another block of the same launch may write (write's seed records).
__device__ __forceinline__ u64 ld_cg(const void* p) {
  u64 v;
  asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_u64(void* p, u64 v) {
  asm volatile("st.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void st_v2(void* p, u64 a, u64 b) {
  asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
#else
// Host emulation (tests/backends/cuda/emulation): the same accesses as plain C++, alignment checked.
__device__ __forceinline__ u64 ld_nc(const void* p) { return kvc_emu_load(p, 8); }
__device__ __forceinline__ U64x2 ld_nc_v2(const void* p) {
  return U64x2{kvc_emu_load(p, 16), kvc_emu_load((const char*)p + 8, 0)};
}
__device__ __forceinline__ u64 ld_now(const void* p) { return ld_nc(p); }
__device__ __forceinline__ int ld_now_s32(const int* p) {
  if (((uintptr_t)p % 4) != 0) kvc_emu_fault(p);
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
__device__ __forceinline__ u64 ld_cg(const void* p) { return ld_nc(p); }
__device__ __forceinline__ void st_u64(void* p, u64 v) { kvc_emu_store(p, v, 8); }
__device__ __forceinline__ void st_v2(void* p, u64 a, u64 b) {
  kvc_emu_store(p, a, 16);
  kvc_emu_store((char*)p + 8, b, 0);
}
#endif

// ---- the violation ring ------------------------------------------------------------------------------------
// Fill-once: every row bumps the int32 write index; a row is stored only if its ticket is in [0, capacity).
// Rows of one launch land in any order (the parity tests compare them as a multiset).
struct Ring {
  i64* rows;
  i64 capacity;
  int* write_index;
  i64 kind;

  __device__ __forceinline__ void push(i64 slot, i64 position, i64 stored_token, i64 expected_token,
                                       i64 stored_chain_hash, i64 expected_aux, i64 bits) const {
    const int seq = atomicAdd(write_index, 1);
    if (seq >= 0 && (i64)seq < capacity) {
      i64* row = rows + (i64)seq * kViolationFields;
      row[0] = kind;
      row[1] = slot;
      row[2] = position;
      row[3] = stored_token;
      row[4] = expected_token;
      row[5] = stored_chain_hash;
      row[6] = expected_aux;
      row[7] = bits;
    }
  }
};

// ---- real-KV sources ---------------------------------------------------------------------------------------
// One RealKvSource, as the host packs it: slot s owns the strip at byte
// (s / page) * row_stride + (s % page) * nbpt; `chunks` 16-byte chunks of it are folded (1 in PARTIAL mode).
struct Source {
  const unsigned char* base;
  i64 rows;
  i64 row_stride;
  i64 page;
  i64 nbpt;
  i64 chunks;
};

// Byte offset of `slot`'s strip, or -1 when its row lies outside the tensor. `slot` must be >= 0. Where slot and
// page both fit in 32 bits the division is a 32-bit one (the same quotient; a 64-bit division is a called
// routine, on the critical path of a one-token write's fold).
__device__ __forceinline__ i64 strip_offset(const Source& s, i64 slot) {
  i64 row = slot;
  i64 col = 0;
  if (s.page != 1) {
    if ((u64)slot <= 0xffffffffULL && (u64)s.page <= 0xffffffffULL && s.page != 0) {
      const u32 q = (u32)slot / (u32)s.page;
      row = (i64)q;
      col = (i64)((u32)slot - q * (u32)s.page);
    } else {
      row = slot / s.page;
      col = slot - row * s.page;
    }
  }
  return row < s.rows ? row * s.row_stride + col * s.nbpt : (i64)-1;
}

// The per-source hash of one strip: splitmix64 over its little-endian words, two per 16-byte chunk.
template <bool kPartial>
__device__ __forceinline__ u64 fold_strip(const Source& s, i64 off) {
  const unsigned char* p = s.base + off;
  u64 h = 0;
  if (kPartial) {
    const U64x2 a = ld_nc_v2(p);
    h = splitmix64(h ^ a.x);
    h = splitmix64(h ^ a.y);
  } else {
    const i64 n = s.chunks;
    i64 c = 0;
    for (; c + 4 <= n; c += 4) {  // 64 bytes per step, all four loads issued before hashing
      const U64x2 a = ld_nc_v2(p + c * 16);
      const U64x2 b = ld_nc_v2(p + c * 16 + 16);
      const U64x2 d = ld_nc_v2(p + c * 16 + 32);
      const U64x2 e = ld_nc_v2(p + c * 16 + 48);
      h = splitmix64(h ^ a.x);
      h = splitmix64(h ^ a.y);
      h = splitmix64(h ^ b.x);
      h = splitmix64(h ^ b.y);
      h = splitmix64(h ^ d.x);
      h = splitmix64(h ^ d.y);
      h = splitmix64(h ^ e.x);
      h = splitmix64(h ^ e.y);
    }
    for (; c < n; ++c) {
      const U64x2 a = ld_nc_v2(p + c * 16);
      h = splitmix64(h ^ a.x);
      h = splitmix64(h ^ a.y);
    }
  }
  return h;
}

// The slot's real_kv_hash over kNsrc sources in order; a strip outside its source folds as 0 and sets oob.
// PARTIAL issues every source's 16-byte load before hashing any, so they are in flight together.
template <int kNsrc, bool kPartial>
__device__ __forceinline__ u64 fold_sources(const Source* src, i64 slot, bool& oob) {
  u64 acc = 0;
  if (kPartial) {
    U64x2 v[kNsrc > 0 ? kNsrc : 1];
    bool ok[kNsrc > 0 ? kNsrc : 1];
#pragma unroll
    for (int i = 0; i < kNsrc; ++i) {
      const i64 off = strip_offset(src[i], slot);
      ok[i] = off >= 0;
      v[i] = U64x2{0, 0};
      if (ok[i]) v[i] = ld_nc_v2(src[i].base + off);
    }
#pragma unroll
    for (int i = 0; i < kNsrc; ++i) {
      const u64 h = ok[i] ? splitmix64(splitmix64(v[i].x) ^ v[i].y) : 0;
      oob |= !ok[i];
      acc = splitmix64(acc ^ h);
    }
    return acc;
  }
#pragma unroll
  for (int i = 0; i < kNsrc; ++i) {
    const i64 off = strip_offset(src[i], slot);
    u64 h = 0;
    if (off >= 0) {
      h = fold_strip<false>(src[i], off);
    } else {
      oob = true;
    }
    acc = splitmix64(acc ^ h);
  }
  return acc;
}

// Whether any of the kNsrc strips of `slot` lies outside its source (no memory access).
template <int kNsrc>
__device__ __forceinline__ bool sources_oob(const Source* src, i64 slot) {
  bool oob = false;
#pragma unroll
  for (int i = 0; i < kNsrc; ++i) oob |= strip_offset(src[i], slot) < 0;
  return oob;
}

}  // namespace kvc

// ---- kernel parameters of the real-KV sources --------------------------------------------------------------
// Every kernel parameter is 8 bytes (pointers and long long): the host passes Python ints, which cuda.core
// packs as intptr_t. A specialization with KVC_NSRC sources takes 6 parameters per source, last.
#ifndef KVC_NSRC
#define KVC_NSRC 0
#endif

#define KVC_SOURCE_PARAMS(i)                                                                            \
  , const unsigned char *s##i##_base, long long s##i##_rows, long long s##i##_stride, long long s##i##_page, \
      long long s##i##_nbpt, long long s##i##_chunks
#define KVC_SOURCE_INIT(i) \
  src[i] = kvc::Source{s##i##_base, s##i##_rows, s##i##_stride, s##i##_page, s##i##_nbpt, s##i##_chunks};

#if KVC_NSRC >= 1
#define KVC_P0 KVC_SOURCE_PARAMS(0)
#define KVC_I0 KVC_SOURCE_INIT(0)
#else
#define KVC_P0
#define KVC_I0
#endif
#if KVC_NSRC >= 2
#define KVC_P1 KVC_SOURCE_PARAMS(1)
#define KVC_I1 KVC_SOURCE_INIT(1)
#else
#define KVC_P1
#define KVC_I1
#endif
#if KVC_NSRC >= 3
#define KVC_P2 KVC_SOURCE_PARAMS(2)
#define KVC_I2 KVC_SOURCE_INIT(2)
#else
#define KVC_P2
#define KVC_I2
#endif
#if KVC_NSRC >= 4
#define KVC_P3 KVC_SOURCE_PARAMS(3)
#define KVC_I3 KVC_SOURCE_INIT(3)
#else
#define KVC_P3
#define KVC_I3
#endif
#if KVC_NSRC > 4
#error "KVC_NSRC must be in [0, 4] (MAX_REAL_KV_SOURCES)"
#endif

#define KVC_ALL_SOURCE_PARAMS KVC_P0 KVC_P1 KVC_P2 KVC_P3

// The dynamic shared-memory array of a kernel (the host emulation provides its own).
#ifndef KVC_HOST_EMULATION
#define KVC_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif
#define KVC_DECLARE_SOURCES                     \
  kvc::Source src[KVC_NSRC > 0 ? KVC_NSRC : 1]; \
  KVC_I0 KVC_I1 KVC_I2 KVC_I3

// floors_probes.cu: CUDA C++ floor probes for benchmarks/floors_cuda.py (the same compiler and launch path as
// the backend's kernels, so a ratio compares like with like). Built by NVRTC like the kernels.
#include "kvcanary_common.cuh"

using namespace kvc;

// An empty kernel: the launch-bound floor.
extern "C" __global__ void kvc_probe_empty(long long unused) { (void)unused; }

// The dependent loads of a one-token write, and nothing else: lane 0 of warp r reads request r's offset and
// seed, then the seed record's hash, the token and the slot at that offset, and stores one word at the slot
// (two dependent loads, then a store at a loaded address). The floor of a write of one-token requests.
extern "C" __global__ void kvc_probe_dep2(const long long* offs, const long long* seeds, const long long* ids,
                                          const long long* locs, const unsigned long long* recs,
                                          unsigned long long* out, long long n) {
  const long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if ((threadIdx.x & 31) != 0 || r >= n) return;
  const long long o = offs[r];
  const long long s = seeds[r];
  const unsigned long long h = recs[s * 4 + 2];
  out[locs[o] * 4] = h ^ (unsigned long long)ids[o];
}

// A one-token write's dependent loads with real-KV PARTIAL: kvc_probe_dep2's, then at the loaded slot each
// source's 256-byte strip (the warp's 32 lanes read 8 bytes each), folded across the warp, and one store. The
// strips' address is the loaded slot: a third dependent round, which a PARTIAL write cannot avoid either.
extern "C" __global__ void kvc_probe_dep3(const long long* offs, const long long* seeds, const long long* ids,
                                          const long long* locs, const unsigned long long* recs,
                                          unsigned long long* out, long long n, const unsigned char* s0,
                                          const unsigned char* s1, const unsigned char* s2, const unsigned char* s3,
                                          long long nsrc, long long stride) {
  const long long r = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (r >= n) return;  // uniform across the warp: r is the warp's
  const long long o = offs[r];
  const long long s = seeds[r];
  const unsigned long long h = recs[s * 4 + 2];
  const long long loc = locs[o];
  const unsigned char* src[4] = {s0, s1, s2, s3};
  unsigned long long acc = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (i < nsrc) acc ^= reinterpret_cast<const unsigned long long*>(src[i] + loc * stride)[lane];
  }
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, d);
  if (lane == 0) out[loc * 4] = h ^ (unsigned long long)ids[o] ^ acc;
}

// One serial mix3 chain, every operand in registers (the next step's inputs do not depend on the chain):
// the dependency floor of write's per-request loop.
extern "C" __global__ void kvc_probe_serial(unsigned long long* out, long long steps, long long seed) {
  u64 h = (u64)seed;
  u64 tok = (u64)seed * 3 + 1;
  u64 pos = (u64)seed * 5 + 7;
  for (i64 i = 0; i < steps; ++i) {
    h = mix3(h, tok, pos);
    tok += 0x9E3779B97F4A7C15ULL;
    pos += 1;
  }
  if (threadIdx.x == 0) out[0] = h;
}

// The same chain started from values loaded from memory (one per lane): what ptxas then computes on the vector
// datapath. kvc_probe_serial's operands all come from kernel parameters, and ptxas runs it on the uniform
// datapath, whose 64-bit multiply chain is faster (74.8 vs 101.3 ns per mix3 step on the H200, 2026-12-03).
// A chain over tokens read from memory cannot get there: only constant-bank loads fill uniform registers, and
// ptxas moves values that reach them otherwise (REDUX, ldu) back to vector registers before the arithmetic.
extern "C" __global__ void kvc_probe_serial_vector(unsigned long long* io, long long steps) {
  u64 h = io[threadIdx.x];
  u64 tok = io[32 + threadIdx.x];
  u64 pos = io[64 + threadIdx.x];
  for (i64 i = 0; i < steps; ++i) {
    h = mix3(h, tok, pos);
    tok += 0x9E3779B97F4A7C15ULL;
    pos += 1;
  }
  io[threadIdx.x] = h;
}

// The same chain with each step's token and position loaded from memory inside the loop, as a plain loop
// over the request's tokens does (the compiler schedules the loads).
extern "C" __global__ void kvc_probe_serial_loads(unsigned long long* out, const long long* toks, const long long* poss,
                                                  long long steps) {
  u64 h = 1;
  for (i64 i = 0; i < steps; ++i) h = mix3(h, (u64)toks[i], (u64)poss[i]);
  if (threadIdx.x == 0) out[0] = h;
}

// The random gather of two 32-byte records per entry (16 B of indices in, 8 B out) with 16-byte loads: the
// memory floor of verify. Each thread takes U entries a block-width apart (coalesced index loads) and issues
// all 2U index loads, then all 4U record loads, before it combines anything: 4U loads in flight per thread.
// The loads allocate in L1, so a record's second half merges into its first half's miss (one L2 request per
// 32-byte sector; non-allocating loads made two and ran 1.46x slower on the H200).
// Instantiated for U = 1, 2, 4, 8 (floors_cuda.gather_floor_cuda keeps the fastest).
// The two records of U entries per thread (entry e0 + u * 256): every index load, then every record load,
// issued before any value is used. Shared by both gather probes so they load alike.
template <int U>
struct Records {
  i64 s[U];
  U64x2 a0[U], a1[U], b0[U], b1[U];
};

template <int U>
__device__ __forceinline__ Records<U> load_records(const unsigned char* buf, const long long* slots,
                                                   const long long* prevs, long long n, long long stride, i64 e0) {
  Records<U> r;
  i64 p[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const i64 e = e0 + (i64)u * 256;
    r.s[u] = e < n ? (i64)ld_nc(slots + e) : 0;
    p[u] = e < n ? (i64)ld_nc(prevs + e) : 0;
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const unsigned char* a = buf + r.s[u] * stride;
    const unsigned char* b = buf + p[u] * stride;
    r.a0[u] = ld_nc_v2(a);
    r.a1[u] = ld_nc_v2(a + 16);
    r.b0[u] = ld_nc_v2(b);
    r.b1[u] = ld_nc_v2(b + 16);
  }
  return r;
}

template <int U>
__device__ __forceinline__ u64 fold_records(const Records<U>& r, int u) {
  return r.a0[u].x ^ r.a0[u].y ^ r.a1[u].x ^ r.a1[u].y ^ r.b0[u].x ^ r.b0[u].y ^ r.b1[u].x ^ r.b1[u].y;
}

template <int U>
__device__ __forceinline__ void gather2(const unsigned char* buf, const long long* slots, const long long* prevs,
                                        long long* out, long long n, long long stride) {
  const i64 e0 = (i64)blockIdx.x * 256 * U + threadIdx.x;
  const Records<U> r = load_records<U>(buf, slots, prevs, n, stride, e0);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const i64 e = e0 + (i64)u * 256;
    if (e < n) out[e] = (i64)fold_records<U>(r, u);
  }
}

#define KVC_GATHER2(U)                                                                                        \
  extern "C" __global__ void __launch_bounds__(256)                                                            \
      kvc_probe_gather2_u##U(const unsigned char* buf, const long long* slots, const long long* prevs,          \
                             long long* out, long long n, long long stride) {                                 \
    gather2<U>(buf, slots, prevs, out, n, stride);                                                             \
  }
KVC_GATHER2(1)
KVC_GATHER2(2)
KVC_GATHER2(4)
KVC_GATHER2(8)

// The gather plus `chunks` 16-byte chunks of the slot's strip in each of `nsrc` (<= 2) sources of one slot per
// row: the memory pattern of verify with real-KV hashing, without the hashing. U entries per thread as above;
// every record and strip load of the U entries is issued before any is combined (chunks <= 8 per source).
template <int U>
__device__ __forceinline__ void gather_rkv(const unsigned char* buf, const long long* slots, const long long* prevs,
                                           long long* out, long long n, long long stride, const unsigned char* src0,
                                           const unsigned char* src1, long long src_stride, long long nsrc,
                                           long long chunks) {
  const i64 e0 = (i64)blockIdx.x * 256 * U + threadIdx.x;
  const Records<U> r = load_records<U>(buf, slots, prevs, n, stride, e0);  // the strip loads go out behind them
  u64 acc[U];
#pragma unroll
  for (int u = 0; u < U; ++u) acc[u] = 0;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    for (i64 i = 0; i < nsrc; ++i) {
      const unsigned char* q = (i == 0 ? src0 : src1) + r.s[u] * src_stride;
      i64 c = 0;
      for (; c + 8 <= chunks; c += 8) {
        U64x2 v[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) v[k] = ld_nc_v2(q + 16 * (c + k));
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[u] ^= v[k].x ^ v[k].y;
      }
      for (; c < chunks; ++c) {
        const U64x2 v = ld_nc_v2(q + 16 * c);
        acc[u] ^= v.x ^ v.y;
      }
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const i64 e = e0 + (i64)u * 256;
    acc[u] ^= fold_records<U>(r, u);
    if (e < n) out[e] = (i64)acc[u];
  }
}

#define KVC_GATHER_RKV(U)                                                                                      \
  extern "C" __global__ void __launch_bounds__(256) kvc_probe_gather_rkv_u##U(                                \
      const unsigned char* buf, const long long* slots, const long long* prevs, long long* out, long long n,    \
      long long stride, const unsigned char* src0, const unsigned char* src1, long long src_stride,             \
      long long nsrc, long long chunks) {                                                                       \
    gather_rkv<U>(buf, slots, prevs, out, n, stride, src0, src1, src_stride, nsrc, chunks);                     \
  }
KVC_GATHER_RKV(1)
KVC_GATHER_RKV(2)
KVC_GATHER_RKV(4)

// The plan's memory traffic and nothing else: per entry one int32 read and four int64 written, a plain coalesced
// stream (the verify entries' slot, token, position and predecessor). The floor of the plan at its size, as a
// kernel can move those bytes: each thread takes U rounds of W consecutive entries (W = 2: 16-byte stores),
// every load issued before any store. Instantiated for a few (U, W); floors_cuda.plan_stream_cuda keeps the
// fastest.
struct alignas(16) I64x2 {
  long long a;
  long long b;
};

template <int U, int W>
__device__ __forceinline__ void stream_plan(const int* in, long long* o0, long long* o1, long long* o2, long long* o3,
                                            long long n) {
  static_assert(W == 1 || W == 2, "one or two entries per store");
  constexpr i64 kRound = 256 * W;
  const i64 e0 = (i64)blockIdx.x * kRound * U + (i64)threadIdx.x * W;
  long long v[U][W];
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const i64 e = e0 + u * kRound + w;
      v[u][w] = e < n ? in[e] : 0;
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const i64 e = e0 + u * kRound;
    if (W == 2 && e + 1 < n) {  // n even and the bases 16-byte aligned (the caller's tensors): one store each
      *(I64x2*)(o0 + e) = I64x2{v[u][0], v[u][W - 1]};
      *(I64x2*)(o1 + e) = I64x2{v[u][0] + 1, v[u][W - 1] + 1};
      *(I64x2*)(o2 + e) = I64x2{e, e + 1};
      *(I64x2*)(o3 + e) = I64x2{v[u][0] - 1, v[u][W - 1] - 1};
      continue;
    }
#pragma unroll
    for (int w = 0; w < W; ++w) {
      if (e + w < n) {
        o0[e + w] = v[u][w];
        o1[e + w] = v[u][w] + 1;
        o2[e + w] = e + w;
        o3[e + w] = v[u][w] - 1;
      }
    }
  }
}

#define KVC_STREAM_PLAN(U, W)                                                                                  \
  extern "C" __global__ void __launch_bounds__(256) kvc_probe_stream_plan_u##U##_w##W(                         \
      const int* in, long long* o0, long long* o1, long long* o2, long long* o3, long long n) {                 \
    stream_plan<U, W>(in, o0, o1, o2, o3, n);                                                                   \
  }
KVC_STREAM_PLAN(4, 1)
KVC_STREAM_PLAN(16, 1)
KVC_STREAM_PLAN(2, 2)
KVC_STREAM_PLAN(8, 2)
